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
//!   loads: see [`crate::guests`]);
//! - requests (`mapTo`, `mapByLabel`/`mapByAnnotation` namespaces, tickers) must be in the
//!   namespace, `mapToNamespace` (cluster-scoped requests) is refused, and the controller drops
//!   any request its handlers or `map` export produce elsewhere;
//! - webhooks see only requests in the namespace (a `namespaceSelector` on
//!   `kubernetes.io/metadata.name` is added, rules are scoped `Namespaced`).
//!
//! The same rules are enforced at admission by a ValidatingAdmissionPolicy (see
//! `install::tenancy`), with the same field names in its messages.
//!
//! # Quotas
//!
//! A [`TenantQuota`] (`--tenant-quota guests=5,memory=1Gi,cpu=2`) bounds what the guests of
//! one namespace may use together: how many, their memory (each guest's
//! `limits.totalMemory`, or what its instances may hold by default) and their CPU
//! (`limits.cpu`). Within a namespace the oldest objects are counted first; one that would take
//! the namespace over is refused (`QuotaExceeded`) and does not start. As with a Kubernetes
//! ResourceQuota, guests already running are never stopped by one: a running guest whose
//! object the quota now refuses keeps its version, degraded.

use serde_json::{Value, json};

use crate::manifest::{Manifest, ManifestError, is_builtin_cluster_scoped};
use krec_core::Gvk;

/// The label every namespace carries with its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the guests of one namespace may use together; `None`: no bound.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantQuota {
    /// How many guests.
    pub guests: Option<u32>,
    /// Their memory, in bytes.
    pub memory: Option<u64>,
    /// Their CPU, in cores.
    pub cpu: Option<f64>,
}

impl std::str::FromStr for TenantQuota {
    type Err = String;

    /// `guests=5,memory=1Gi,cpu=2`, any of the three.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut quota = TenantQuota::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected key=value (guests, memory or cpu)"))?;
            match key.trim() {
                "guests" => {
                    quota.guests = Some(value.trim().parse().map_err(|_| {
                        format!("guests={value}: expected a whole number of guests")
                    })?);
                }
                "memory" => {
                    quota.memory = Some(
                        crate::manifest::parse_quantity(value.trim()).map_err(|e| e.to_string())?,
                    );
                }
                "cpu" => {
                    quota.cpu =
                        Some(crate::manifest::parse_cpu(value.trim()).map_err(|e| e.to_string())?);
                }
                other => {
                    return Err(format!(
                        "{other:?}: a tenant quota bounds guests, memory or cpu"
                    ));
                }
            }
        }
        Ok(quota)
    }
}

impl std::fmt::Display for TenantQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(guests) = self.guests {
            parts.push(format!("guests={guests}"));
        }
        if let Some(memory) = self.memory {
            parts.push(format!("memory={}", bytes(memory)));
        }
        if let Some(cpu) = self.cpu {
            parts.push(format!("cpu={}", millicores(cpu)));
        }
        f.write_str(&parts.join(","))
    }
}

fn bytes(n: u64) -> String {
    const MI: u64 = 1 << 20;
    const GI: u64 = 1 << 30;
    if n.is_multiple_of(GI) && n > 0 {
        format!("{}Gi", n / GI)
    } else if n.is_multiple_of(MI) && n > 0 {
        format!("{}Mi", n / MI)
    } else {
        n.to_string()
    }
}

fn millicores(cores: f64) -> String {
    // Rounded to whole millicores, as Kubernetes quantities are.
    let milli = (cores * 1000.0).round();
    if milli % 1000.0 == 0.0 {
        format!("{}", milli / 1000.0)
    } else {
        format!("{milli}m")
    }
}

/// A tenant's guest as [`within_quota`] weighs it: its object's namespace and creation time,
/// and its manifest (or why it is refused already).
pub struct Weighed {
    /// The namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp`: older objects are counted first.
    pub created: String,
    /// The manifest, or why it is refused.
    pub manifest: Result<Manifest, ManifestError>,
}

/// Refuse the manifests that would take their namespace over `quota`, counting each
/// namespace's oldest objects first (then by name).
pub fn within_quota(
    quota: &TenantQuota,
    mut guests: Vec<Weighed>,
) -> Vec<Result<Manifest, ManifestError>> {
    if *quota == TenantQuota::default() {
        return guests.into_iter().map(|g| g.manifest).collect();
    }
    let name = |g: &Weighed| match &g.manifest {
        Ok(m) => m.path.clone(),
        Err(e) => e.path().to_owned(),
    };
    guests.sort_by(|a, b| {
        (&a.namespace, &a.created, name(a)).cmp(&(&b.namespace, &b.created, name(b)))
    });
    let mut used: std::collections::BTreeMap<String, (u32, u64, f64)> = Default::default();
    guests
        .into_iter()
        .map(|guest| {
            let manifest = guest.manifest?;
            let (count, memory, cpu) = used.get(&guest.namespace).copied().unwrap_or_default();
            let next = (
                count.saturating_add(1),
                memory.saturating_add(manifest.spec.total_memory()),
                cpu + manifest.spec.limits.cpu,
            );
            let over = quota.guests.is_some_and(|q| next.0 > q)
                || quota.memory.is_some_and(|q| next.1 > q)
                || quota.cpu.is_some_and(|q| next.2 > q + 1e-9);
            if over {
                return Err(ManifestError::OverQuota {
                    path: manifest.path.clone(),
                    problem: format!(
                        "namespace {:?} would exceed its quota (--tenant-quota {quota}): with this \
                         guest its guests would be {}, with {} of memory and {} CPU; delete a \
                         Reconciler there, lower its limits, or ask for a larger quota",
                        guest.namespace,
                        next.0,
                        bytes(next.1),
                        millicores(next.2)
                    ),
                });
            }
            used.insert(guest.namespace, next);
            Ok(manifest)
        })
        .collect()
}

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
    if let Some(secret) = &mut spec.pull_secret {
        match secret.namespace.as_deref() {
            None => secret.namespace = Some(namespace.to_owned()),
            Some(n) if n == namespace => {}
            Some(other) => {
                return Err(elsewhere("spec.pullSecret.namespace".into(), other));
            }
        }
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

#[cfg(test)]
mod quota_tests {
    use super::*;
    use std::path::Path;

    fn guest(namespace: &str, name: &str, created: &str, memory: &str, cpu: &str) -> Weighed {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: m.wasm\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  limits: {{memory: 16Mi, totalMemory: {memory}, cpu: {cpu}}}\n"
        );
        let path = format!("Reconciler {namespace}/{name}");
        Weighed {
            namespace: namespace.into(),
            created: created.into(),
            manifest: Manifest::parse_in(Path::new(&path), Path::new("."), &text),
        }
    }

    #[test]
    fn a_quota_should_read_and_print_as_the_flag_is_written() {
        let quota: TenantQuota = "guests=3, memory=1Gi,cpu=1500m".parse().expect("quota");
        assert_eq!(quota.guests, Some(3));
        assert_eq!(quota.memory, Some(1 << 30));
        assert_eq!(quota.to_string(), "guests=3,memory=1Gi,cpu=1500m");
        for bad in ["guests", "pods=3", "memory=lots", "guests=-1"] {
            assert!(bad.parse::<TenantQuota>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_newest_guests_over_a_namespaces_quota_should_be_refused() {
        let quota: TenantQuota = "guests=2,memory=96Mi".parse().expect("quota");
        let scanned = within_quota(
            &quota,
            vec![
                guest("a", "newest", "2026-01-03T00:00:00Z", "32Mi", "1"),
                guest("a", "oldest", "2026-01-01T00:00:00Z", "32Mi", "1"),
                guest("a", "middle", "2026-01-02T00:00:00Z", "32Mi", "1"),
                guest("b", "big", "2026-01-01T00:00:00Z", "64Mi", "1"),
                guest("b", "bigger", "2026-01-02T00:00:00Z", "64Mi", "1"),
            ],
        );
        let shown: Vec<String> = scanned
            .iter()
            .map(|r| match r {
                Ok(m) => format!("ok {}", m.path.display()),
                Err(e) => format!("{}: {e}", e.code()),
            })
            .collect();
        assert_eq!(shown[0], "ok Reconciler a/oldest");
        assert_eq!(shown[1], "ok Reconciler a/middle");
        assert!(
            shown[2].starts_with("QuotaExceeded: Reconciler a/newest: namespace \"a\" would exceed its quota (--tenant-quota guests=2,memory=96Mi): with this guest its guests would be 3, with 96Mi of memory and 3 CPU"),
            "{}", shown[2]
        );
        assert_eq!(shown[3], "ok Reconciler b/big");
        assert!(
            shown[4].contains("its guests would be 2, with 128Mi of memory"),
            "{}",
            shown[4]
        );
        assert_eq!(
            within_quota(
                &TenantQuota::default(),
                vec![guest("a", "x", "", "1Gi", "8")]
            )
            .len(),
            1
        );
    }
}
