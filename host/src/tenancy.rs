//! Tenancy: a namespaced `Reconciler` is confined to its own namespace, whatever its spec asks.
//!
//! [`confine`] is applied to every `Reconciler` object's manifest before it loads, so the checks
//! every host call already makes (a guest's permissions, with their namespaces) keep the guest
//! in its namespace:
//!
//! - `namespaces` and every permission's `namespaces` become exactly the object's namespace;
//!   naming another one is refused;
//! - kinds the Kubernetes API serves cluster-scoped are refused in `for`, `owns`, `watches`,
//!   `permissions` and `uncached` (kinds from CRDs are checked against discovery when the guest
//!   loads: see [`crate::manager`]);
//! - requests (`mapTo`, `mapByLabel`/`mapByAnnotation` namespaces, tickers) must be in the
//!   namespace, `mapToNamespace` (cluster-scoped requests) is refused, and the controller drops
//!   any request its handlers or `map` export produce elsewhere;
//! - webhooks see only requests in the namespace (a `namespaceSelector` on
//!   `kubernetes.io/metadata.name` is added, rules are scoped `Namespaced`).
//!
//! The same rules are enforced at admission by a ValidatingAdmissionPolicy (see
//! [`admission_policy`]), with the same field names in its messages.

use serde_json::{Value, json};

use crate::manifest::{Manifest, ManifestError, is_builtin_cluster_scoped};
use crate::vocab::Gvk;

/// The label every namespace carries with its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Confine `manifest` (of a `Reconciler` in `namespace`) to that namespace, or say which
/// field asks for more.
pub fn confine(manifest: &mut Manifest, namespace: &str) -> Result<(), ManifestError> {
    let invalid = |field: String, problem: String| ManifestError::Invalid {
        path: manifest.path.clone(),
        field,
        problem,
    };
    let elsewhere = |field: String, asked: &str| {
        invalid(
            field,
            format!(
                "{asked:?} is another namespace: a Reconciler in {namespace:?} may only use its own \
                 namespace (a ClusterReconciler may use others)"
            ),
        )
    };
    let cluster_scoped = |field: String, gvk: &Gvk| {
        invalid(
            field,
            format!(
                "{gvk} is cluster-scoped: a Reconciler may only use namespaced kinds (a \
                 ClusterReconciler may use cluster-scoped ones)"
            ),
        )
    };
    let spec = &mut manifest.spec;
    if let Some(other) = spec.namespaces.iter().find(|n| *n != namespace) {
        return Err(elsewhere("spec.namespaces".into(), other));
    }
    spec.namespaces = vec![namespace.to_owned()];
    if let Some(kind) = &spec.for_kind
        && is_builtin_cluster_scoped(&kind.gvk())
    {
        return Err(cluster_scoped("spec.for".into(), &kind.gvk()));
    }
    for (i, kind) in spec.owns.iter().enumerate() {
        if is_builtin_cluster_scoped(&kind.gvk()) {
            return Err(cluster_scoped(format!("spec.owns[{i}]"), &kind.gvk()));
        }
    }
    for (i, kind) in spec.uncached.iter().enumerate() {
        if is_builtin_cluster_scoped(&kind.gvk()) {
            return Err(cluster_scoped(format!("spec.uncached[{i}]"), &kind.gvk()));
        }
    }
    for (i, watch) in spec.watches.iter().enumerate() {
        let field = format!("spec.watches[{i}]");
        let gvk = watch.kind_ref().gvk();
        if is_builtin_cluster_scoped(&gvk) {
            return Err(cluster_scoped(field, &gvk));
        }
        if watch.map_to_namespace {
            return Err(invalid(
                format!("{field}.mapToNamespace"),
                "maps to cluster-scoped requests: a Reconciler's requests stay in its namespace"
                    .into(),
            ));
        }
        match &watch.map_to {
            Some(request) if request.namespace.as_deref() != Some(namespace) => {
                let asked = request.namespace.as_deref().unwrap_or("");
                return Err(elsewhere(format!("{field}.mapTo.namespace"), asked));
            }
            _ => {}
        }
        for (mapping, name) in [
            (&watch.map_by_label, "mapByLabel"),
            (&watch.map_by_annotation, "mapByAnnotation"),
        ] {
            if let Some(other) = mapping
                .as_ref()
                .and_then(|m| m.namespace.as_deref())
                .filter(|n| *n != namespace)
            {
                return Err(elsewhere(format!("{field}.{name}.namespace"), other));
            }
        }
    }
    for (i, ticker) in spec.tickers.iter_mut().enumerate() {
        match ticker.request.namespace.as_deref() {
            None => ticker.request.namespace = Some(namespace.to_owned()),
            Some(n) if n == namespace => {}
            Some(other) => {
                return Err(elsewhere(
                    format!("spec.tickers[{i}].request.namespace"),
                    other,
                ));
            }
        }
    }
    for (i, permission) in spec.permissions.iter_mut().enumerate() {
        let gvk = Gvk::from_api_version(&permission.api_version, &permission.kind);
        if is_builtin_cluster_scoped(&gvk) {
            return Err(cluster_scoped(format!("spec.permissions[{i}]"), &gvk));
        }
        if let Some(other) = permission.namespaces.iter().find(|n| *n != namespace) {
            return Err(elsewhere(
                format!("spec.permissions[{i}].namespaces"),
                other,
            ));
        }
        permission.namespaces = vec![namespace.to_owned()];
    }
    if spec.conversion.is_some() {
        return Err(invalid(
            "spec.conversion".into(),
            "a CRD's conversion webhook serves the whole cluster: a Reconciler may not serve one \
             (a ClusterReconciler may)"
                .into(),
        ));
    }
    for webhook in &mut spec.webhooks {
        let mut selector = webhook
            .namespace_selector
            .take()
            .unwrap_or_else(|| json!({}));
        let own = json!({"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [namespace]});
        match selector
            .get_mut("matchExpressions")
            .and_then(Value::as_array_mut)
        {
            Some(expressions) => expressions.push(own),
            None => selector["matchExpressions"] = json!([own]),
        }
        webhook.namespace_selector = Some(selector);
        for rule in &mut webhook.rules {
            rule.scope = Some("Namespaced".to_owned());
        }
    }
    manifest.tenant = Some(namespace.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn manifest(spec: &str) -> Manifest {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: foo}}\nspec:\n  module: foo.wasm\n{spec}"
        );
        Manifest::parse_in(Path::new("Reconciler team-a/foo"), Path::new("."), &text)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn refused(spec: &str) -> String {
        let spec = if spec.contains("for:") {
            spec.to_owned()
        } else {
            format!("  for: {{apiVersion: v1, kind: ConfigMap}}\n{spec}")
        };
        let mut manifest = manifest(&spec);
        confine(&mut manifest, "team-a")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_reconciler_should_be_confined_to_its_namespace() {
        let mut m = manifest(
            "  for: {apiVersion: v1, kind: ConfigMap}\n  tickers: [{every: 1m, request: {name: tick}}]\n  permissions:\n    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, update]}\n  webhooks:\n    - type: validating\n      rules: [{apiGroups: [''], apiVersions: [v1], resources: [configmaps], operations: [CREATE]}]\n      namespaceSelector: {matchLabels: {team: a}}\n",
        );
        confine(&mut m, "team-a").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.tenant.as_deref(), Some("team-a"));
        assert_eq!(m.spec.namespaces, ["team-a"]);
        assert_eq!(m.spec.permissions[0].namespaces, ["team-a"]);
        assert_eq!(
            m.spec.tickers[0].request.namespace.as_deref(),
            Some("team-a")
        );
        let hook = &m.spec.webhooks[0];
        assert_eq!(
            hook.namespace_selector,
            Some(json!({"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}))
        );
        assert_eq!(hook.rules[0].scope.as_deref(), Some("Namespaced"));
        let ns = gvk_of(
            &m.spec.permissions[0].api_version,
            &m.spec.permissions[0].kind,
        );
        assert!(m.allows(crate::manifest::Verb::Get, &ns, Some("team-a")));
        assert!(!m.allows(crate::manifest::Verb::Get, &ns, Some("team-b")));
        assert!(
            !m.allows(crate::manifest::Verb::List, &ns, None),
            "not across namespaces"
        );
    }

    fn gvk_of(api_version: &str, kind: &str) -> Gvk {
        Gvk::from_api_version(api_version, kind)
    }

    #[test]
    fn asking_for_more_than_the_namespace_should_be_refused_naming_the_field() {
        let cases = [
            (
                "  namespaces: [team-b]\n",
                "spec.namespaces: \"team-b\" is another namespace",
            ),
            (
                "  permissions:\n    - {apiVersion: v1, kind: ConfigMap, verbs: [get], namespaces: [team-a, team-b]}\n",
                "spec.permissions[0].namespaces: \"team-b\" is another namespace",
            ),
            (
                "  permissions:\n    - {apiVersion: v1, kind: Namespace, verbs: [get]}\n",
                "spec.permissions[0]: v1 Namespace is cluster-scoped",
            ),
            (
                "  for: {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole}\n",
                "spec.for: rbac.authorization.k8s.io/v1 ClusterRole is cluster-scoped",
            ),
            (
                "  owns: [{apiVersion: v1, kind: Node}]\n",
                "spec.owns[0]: v1 Node is cluster-scoped",
            ),
            (
                "  watches: [{apiVersion: v1, kind: ConfigMap, mapTo: {namespace: team-b, name: x}}]\n",
                "spec.watches[0].mapTo.namespace: \"team-b\" is another namespace",
            ),
            (
                "  watches: [{apiVersion: v1, kind: ConfigMap, mapToNamespace: true}]\n",
                "spec.watches[0].mapToNamespace: maps to cluster-scoped requests",
            ),
            (
                "  watches: [{apiVersion: v1, kind: ConfigMap, mapByLabel: {key: k, namespace: kube-system}}]\n",
                "spec.watches[0].mapByLabel.namespace: \"kube-system\" is another namespace",
            ),
            (
                "  conversion: {crd: foos.example.com}\n",
                "spec.conversion: a CRD's conversion webhook serves the whole cluster",
            ),
            (
                "  tickers: [{every: 1m, request: {namespace: team-b, name: tick}}]\n",
                "spec.tickers[0].request.namespace: \"team-b\" is another namespace",
            ),
        ];
        for (spec, expected) in cases {
            let text = refused(spec);
            assert!(
                text.starts_with(&format!("Reconciler team-a/foo: {expected}")),
                "{spec}: {text}"
            );
        }
    }
}
