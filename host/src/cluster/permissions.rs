//! What the host itself may do. Before a guest loads, every permission its manifest asks for
//! (and the `list` and `watch` its watches need) is put to the API server as a
//! SelfSubjectAccessReview for the host's own identity — its ServiceAccount in a cluster. A
//! guest asking for what the host may not do is refused, naming the missing permission, instead
//! of failing at its first call.
//!
//! A server that cannot answer (no SelfSubjectAccessReview API, or no right to ask) is not a
//! refusal: the guest loads and the API server still judges every call.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::client::ApiClient;
use crate::manifest::Manifest;
use krec_core::{CallError, Gvk};

/// One thing the host would do for a guest: `verb` on `gvk` (its `subresource`) in `namespace`
/// (`None`: cluster-wide or every namespace), because of the manifest field `field`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    /// The manifest field asking for it, e.g. `spec.permissions[1]`.
    pub field: String,
    /// The RBAC verb.
    pub verb: &'static str,
    /// The kind.
    pub gvk: Gvk,
    /// `status`, or none.
    pub subresource: Option<&'static str>,
    /// The namespace; `None` for all.
    pub namespace: Option<String>,
}

/// Everything `manifest`'s guest needs the host to be allowed, in manifest order.
pub fn needs(manifest: &Manifest) -> Vec<Need> {
    let spec = &manifest.spec;
    let scopes: Vec<Option<String>> = if spec.namespaces.is_empty() {
        vec![None]
    } else {
        spec.namespaces.iter().cloned().map(Some).collect()
    };
    let mut needs = Vec::new();
    let mut seen = BTreeSet::new();
    let mut need = |field: String, verb, gvk: Gvk, subresource, namespace: Option<String>| {
        let key = (verb, gvk.clone(), subresource, namespace.clone());
        if seen.insert(key) {
            needs.push(Need {
                field,
                verb,
                gvk,
                subresource,
                namespace,
            });
        }
    };
    let mut watched: Vec<(String, Gvk)> = Vec::new();
    if let Some(kind) = &spec.for_kind {
        watched.push(("spec.for".into(), kind.gvk()));
    }
    for (i, kind) in spec.owns.iter().enumerate() {
        watched.push((format!("spec.owns[{i}]"), kind.gvk()));
    }
    for (i, watch) in spec.watches.iter().enumerate() {
        watched.push((format!("spec.watches[{i}]"), watch.kind_ref().gvk()));
    }
    for (field, gvk) in watched {
        for scope in &scopes {
            for verb in ["list", "watch"] {
                need(field.clone(), verb, gvk.clone(), None, scope.clone());
            }
        }
    }
    for (i, permission) in spec.permissions.iter().enumerate() {
        let gvk = Gvk::from_api_version(&permission.api_version, &permission.kind);
        let namespaces: Vec<Option<String>> = if permission.namespaces.is_empty() {
            vec![None]
        } else {
            permission.namespaces.iter().cloned().map(Some).collect()
        };
        for verb in &permission.verbs {
            let (name, subresource) = verb.rbac();
            for namespace in &namespaces {
                need(
                    format!("spec.permissions[{i}]"),
                    name,
                    gvk.clone(),
                    subresource,
                    namespace.clone(),
                );
            }
        }
    }
    needs
}

/// The first of `manifest`'s needs the host may not do, as `field: problem`; `None` when the
/// host may do all (or the server cannot say).
pub async fn first_missing(api: &ApiClient, manifest: &Manifest) -> Option<(String, String)> {
    for need in needs(manifest) {
        // A kind not served is the load's to report, with its own clear error.
        let Ok(resolved) = api.resolve(&need.gvk).await else {
            continue;
        };
        let namespace = need.namespace.filter(|_| resolved.namespaced);
        let resource = resolved.resource.plural.clone();
        let mut attributes = json!({
            "verb": need.verb,
            "group": need.gvk.group,
            "version": need.gvk.version,
            "resource": resource,
        });
        if let Some(sub) = need.subresource {
            attributes["subresource"] = json!(sub);
        }
        if let Some(ns) = &namespace {
            attributes["namespace"] = json!(ns);
        }
        match review(api, attributes).await {
            Ok(true) => {}
            Ok(false) => {
                let qualified = if need.gvk.group.is_empty() {
                    resource
                } else {
                    format!("{resource}.{}", need.gvk.group)
                };
                let resource = match need.subresource {
                    Some(sub) => format!("{qualified}/{sub}"),
                    None => qualified,
                };
                let place = match &namespace {
                    Some(ns) => format!("in the namespace {ns:?}"),
                    None if resolved.namespaced => "in all namespaces".to_owned(),
                    None => "(cluster-scoped)".to_owned(),
                };
                return Some((
                    need.field,
                    format!(
                        "the host may not {} {resource} {place}: grant its ServiceAccount that \
                         (`krec rbac` prints a role for file manifests) or drop it from the guest",
                        need.verb
                    ),
                ));
            }
            Err(err) => {
                tracing::debug!("cannot ask the API server what the host may do: {err}");
                return None;
            }
        }
    }
    None
}

/// Whether the API server allows the host `attributes` (a SelfSubjectAccessReview's
/// `resourceAttributes`).
async fn review(api: &ApiClient, attributes: Value) -> Result<bool, CallError> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    });
    let answer = api.create(&review, "krec").await?;
    Ok(answer["status"]["allowed"].as_bool().unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn needs_should_cover_watches_and_every_permission_once_per_namespace() {
        let text = "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: foo}\nspec:\n  module: foo.wasm\n  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  namespaces: [a, b]\n  permissions:\n    - {apiVersion: apps/v1, kind: ReplicaSet, verbs: [list, patch-status]}\n    - {apiVersion: v1, kind: Pod, verbs: [get], namespaces: [a]}\n";
        let manifest =
            Manifest::parse(Path::new("foo.yaml"), text).unwrap_or_else(|e| panic!("{e}"));
        let shown: Vec<String> = needs(&manifest)
            .iter()
            .map(|n| {
                format!(
                    "{} {} {}{} {}",
                    n.field,
                    n.verb,
                    n.gvk.kind,
                    n.subresource.map(|s| format!("/{s}")).unwrap_or_default(),
                    n.namespace.as_deref().unwrap_or("*")
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "spec.for list ReplicaSet a",
                "spec.for watch ReplicaSet a",
                "spec.for list ReplicaSet b",
                "spec.for watch ReplicaSet b",
                "spec.permissions[0] list ReplicaSet *",
                "spec.permissions[0] patch ReplicaSet/status *",
                "spec.permissions[1] get Pod a",
            ]
        );
    }
}
