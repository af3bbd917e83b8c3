//! The resource types the embedded API server serves: the built-ins and those CRDs define.
//!
//! A [`ResourceType`] is what discovery advertises and what a URL path resolves to: group,
//! version, plural, kind, scope, short names and whether a status subresource exists. The
//! [`ResourceTypes`] holds the built-ins and adds or removes a CRD's types as the CRD is created,
//! changed or deleted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::scale::ScalePaths;
use krec_core::json::Pointer;
use krec_core::kinds::{BUILTIN_KINDS, BuiltinKind};
use serde_json::{Value, json};

/// The Kubernetes version the server serves and reports.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "34");

/// The `gitVersion` the server reports, e.g. `v1.34.0-krec`.
pub fn version_string() -> String {
    let (major, minor) = KUBERNETES_VERSION;
    format!("v{major}.{minor}.0-krec")
}

/// One served resource type (one version of it).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    /// API group, `""` for core.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Kind of its lists, e.g. `ReplicaSetList`.
    pub list_kind: String,
    /// The URL segment, e.g. `replicasets`.
    pub plural: String,
    /// Singular name, e.g. `replicaset`.
    pub singular: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Short names kubectl accepts, e.g. `rs`.
    pub short_names: Vec<String>,
    /// Whether `/status` is a subresource (spec and status are written separately).
    pub status_subresource: bool,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// For CRD-defined types: the OpenAPI v3 schema objects are validated against.
    pub schema: Option<Arc<Value>>,
    /// For CRD-defined types: whether this is the storage version.
    pub storage: bool,
    /// Only `create` is served: a request answered, not an object kept (the access reviews).
    pub create_only: bool,
    /// Whether `/scale` is a subresource, and where it finds the replicas and selector.
    pub scale: Option<ScalePaths>,
    /// For CRD-defined types: the version's `additionalPrinterColumns` (empty: NAME and AGE).
    pub printer_columns: Vec<Value>,
    /// For CRD-defined types with `conversion.strategy: Webhook`: the webhook that converts
    /// objects stored in another version (`None`: versions differ only in `apiVersion`).
    pub conversion: Option<Arc<crate::webhook::ConversionWebhook>>,
}

impl ResourceType {
    /// The `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            joined(&self.group, &self.version)
        }
    }

    /// Whether `api_version` is this type's (as [`api_version`](Self::api_version) spells it),
    /// without building the string.
    pub fn is_api_version(&self, api_version: &str) -> bool {
        if self.group.is_empty() {
            api_version == self.version
        } else {
            api_version
                .split_once('/')
                .is_some_and(|(g, v)| g == self.group && v == self.version)
        }
    }

    /// The storage key prefix, shared by all versions of a resource: `group/plural`.
    pub fn storage_key(&self) -> String {
        joined(&self.group, &self.plural)
    }

    /// `group/version`, or `version` for core (the discovery `groupVersion`).
    pub fn group_version(&self) -> String {
        self.api_version()
    }
}

/// `a/b`, without `format!`'s machinery: every request builds a few of these.
fn joined(a: &str, b: &str) -> String {
    let mut out = String::with_capacity(a.len() + 1 + b.len());
    out.push_str(a);
    out.push('/');
    out.push_str(b);
    out
}

/// Verbs every served resource supports.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The served resource type of a built-in kind.
fn builtin(facts: &BuiltinKind) -> ResourceType {
    ResourceType {
        list_kind: format!("{}List", facts.kind),
        group: facts.group.into(),
        version: facts.version.into(),
        kind: facts.kind.into(),
        plural: facts.plural.into(),
        singular: facts.kind.to_lowercase(),
        namespaced: facts.namespaced(),
        short_names: facts.short_names.iter().map(|s| s.to_string()).collect(),
        status_subresource: facts.status,
        categories: if facts.in_all {
            vec!["all".into()]
        } else {
            vec![]
        },
        schema: None,
        storage: true,
        create_only: facts.create_only,
        scale: facts.scale.then(ScalePaths::workload),
        printer_columns: Vec::new(),
        conversion: None,
    }
}

/// The served type of the built-in kind `kind` of `group` (tests' shorthand).
#[cfg(test)]
pub(crate) fn builtin_type(group: &str, kind: &str) -> ResourceType {
    builtins()
        .into_iter()
        .find(|rt| rt.group == group && rt.kind == kind)
        .unwrap_or_else(|| panic!("{group} {kind} is not a served built-in kind"))
}

/// The built-in resource types the server serves ([`krec_core::kinds`]).
pub fn builtins() -> Vec<ResourceType> {
    BUILTIN_KINDS
        .iter()
        .filter(|k| k.served)
        .map(builtin)
        .collect()
}

/// Why a CRD cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CrdError(pub String);

/// The resource types a CRD object defines, one per served version.
pub fn types_from_crd(crd: &Value) -> Result<Vec<ResourceType>, CrdError> {
    let spec = crd
        .get("spec")
        .ok_or_else(|| CrdError("spec is required".into()))?;
    let s = |v: &Value, p: &str| v.at(p).and_then(Value::as_str).map(str::to_owned);
    let group = s(spec, "/group").ok_or_else(|| CrdError("spec.group is required".into()))?;
    let plural =
        s(spec, "/names/plural").ok_or_else(|| CrdError("spec.names.plural is required".into()))?;
    let kind =
        s(spec, "/names/kind").ok_or_else(|| CrdError("spec.names.kind is required".into()))?;
    let singular = s(spec, "/names/singular").unwrap_or_else(|| kind.to_lowercase());
    let list_kind = s(spec, "/names/listKind").unwrap_or_else(|| format!("{kind}List"));
    let strings = |p: &str| -> Vec<String> {
        spec.at(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = match s(spec, "/scope").as_deref() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(CrdError(format!(
                "spec.scope must be Namespaced or Cluster, not {other:?}"
            )));
        }
    };
    let name = crd
        .at("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(CrdError(format!(
            "metadata.name must be spec.names.plural+\".\"+spec.group: {plural}.{group}"
        )));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| CrdError("spec.versions must list at least one version".into()))?;
    let conversion = crate::webhook::ConversionWebhook::from_crd_spec(spec);
    let mut types = Vec::new();
    for v in versions {
        let version =
            s(v, "/name").ok_or_else(|| CrdError("spec.versions[].name is required".into()))?;
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        types.push(ResourceType {
            group: group.clone(),
            version,
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: strings("/names/shortNames"),
            status_subresource: v.at("/subresources/status").is_some(),
            categories: strings("/names/categories"),
            schema: v.at("/schema/openAPIV3Schema").cloned().map(Arc::new),
            storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
            create_only: false,
            scale: v.at("/subresources/scale").and_then(ScalePaths::from_crd),
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            conversion: conversion.clone(),
        });
    }
    Ok(types)
}

/// All served resource types; CRD-defined ones come and go with their CRDs.
#[derive(Debug, Default)]
pub struct ResourceTypes {
    types: RwLock<Vec<ResourceType>>,
    /// CRD name → the types it added.
    crds: RwLock<BTreeMap<String, Vec<ResourceType>>>,
    /// Counts changes of the served types (a CRD put or removed).
    generation: AtomicU64,
}

impl ResourceTypes {
    /// The built-in types.
    pub fn new() -> Self {
        ResourceTypes {
            types: RwLock::new(builtins()),
            crds: RwLock::default(),
            generation: AtomicU64::new(0),
        }
    }

    /// A number that changes whenever the served types may have (a CRD was put or removed):
    /// what is derived from the types (OpenAPI documents) is rebuilt when it moves.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<ResourceType>> {
        self.types.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every served type.
    pub fn all(&self) -> Vec<ResourceType> {
        self.read().clone()
    }

    /// The type served at `/apis/{group}/{version}/{plural}` (`group` empty for `/api/v1`).
    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The type stored under a storage key (`group/plural`): its storage version when several
    /// versions are served.
    pub fn by_storage_key(&self, key: &str) -> Option<ResourceType> {
        let types = self.read();
        let mut matching = types.iter().filter(|t| t.storage_key() == key);
        let first = matching.next()?;
        Some(
            std::iter::once(first)
                .chain(matching)
                .find(|t| t.storage)
                .unwrap_or(first)
                .clone(),
        )
    }

    /// The type of a group/version/kind.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<ResourceType> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// Whether `gvk`'s objects live in namespaces; `None` when it is not served.
    pub fn namespaced(&self, group: &str, version: &str, kind: &str) -> Option<bool> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .map(|t| t.namespaced)
    }

    /// Whether any version of `group/version` is served.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.read()
            .iter()
            .any(|t| t.group == group && t.version == version)
    }

    /// Serve the types a CRD defines (replacing those of an earlier version of the CRD).
    pub fn put_crd(&self, crd: &Value) -> Result<(), CrdError> {
        let name = crd
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let new = types_from_crd(crd)?;
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        let mut crds = self.crds.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = crds.remove(&name) {
            types.retain(|t| !old.contains(t));
        }
        types.extend(new.iter().cloned());
        crds.insert(name, new);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Stop serving the types a CRD defined.
    pub fn remove_crd(&self, name: &str) {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        let mut crds = self.crds.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = crds.remove(name) {
            types.retain(|t| !old.contains(t));
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Discovery `APIResourceList` of one group/version.
    pub fn resource_list(&self, group: &str, version: &str) -> Value {
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        let mut resources = Vec::new();
        for t in self
            .read()
            .iter()
            .filter(|t| t.group == group && t.version == version)
        {
            let mut r = json!({
                "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                "kind": t.kind, "verbs": if t.create_only { &["create"][..] } else { VERBS },
            });
            if !t.short_names.is_empty() {
                r["shortNames"] = json!(t.short_names);
            }
            if !t.categories.is_empty() {
                r["categories"] = json!(t.categories);
            }
            resources.push(r);
            if t.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", t.plural), "singularName": "",
                    "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"],
                }));
            }
            if t.group.is_empty() && t.plural == "serviceaccounts" {
                resources.push(json!({
                    "name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                    "verbs": ["create"],
                }));
            }
            if t.scale.is_some() {
                resources.push(json!({
                    "name": format!("{}/scale", t.plural), "singularName": "",
                    "namespaced": t.namespaced, "group": "autoscaling", "version": "v1",
                    "kind": "Scale", "verbs": ["get", "patch", "update"],
                }));
            }
        }
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
    }

    /// Discovery `APIGroupList` of the named groups (`/apis`).
    pub fn group_list(&self) -> Value {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.read().iter().filter(|t| !t.group.is_empty()) {
            let versions = groups.entry(t.group.clone()).or_default();
            if !versions.contains(&t.version) {
                versions.push(t.version.clone());
            }
        }
        let groups: Vec<Value> = groups
            .into_iter()
            .map(|(name, mut versions)| {
                versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
                let entries: Vec<Value> = versions
                    .iter()
                    .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                    .collect();
                json!({"name": name, "versions": entries, "preferredVersion": entries[0]})
            })
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }
}

/// Kubernetes' version ordering: GA > beta > alpha, higher numbers first.
fn version_priority(version: &str) -> (u8, u32, u32) {
    let rest = version.strip_prefix('v').unwrap_or(version);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stability, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stability, major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn foo_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.samplecontroller.k8s.io"},
            "spec": {"group": "samplecontroller.k8s.io", "scope": "Namespaced",
                "names": {"kind": "Foo", "plural": "foos", "shortNames": ["fo"]},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                              "subresources": {"status": {}},
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn a_crd_should_add_and_remove_its_types() {
        let registry = ResourceTypes::new();
        registry.put_crd(&foo_crd()).expect("valid crd");
        let foo = registry
            .by_plural("samplecontroller.k8s.io", "v1alpha1", "foos")
            .expect("served");
        assert_eq!(foo.kind, "Foo");
        assert!(foo.status_subresource && foo.namespaced);
        assert_eq!(foo.short_names, ["fo"]);
        let list = registry.resource_list("samplecontroller.k8s.io", "v1alpha1");
        assert_eq!(list["resources"][1]["name"], "foos/status");
        registry.remove_crd("foos.samplecontroller.k8s.io");
        assert!(
            registry
                .by_plural("samplecontroller.k8s.io", "v1alpha1", "foos")
                .is_none()
        );
        assert!(!registry.serves_group_version("samplecontroller.k8s.io", "v1alpha1"));
    }

    #[test]
    fn versions_should_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }
}
