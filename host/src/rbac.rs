//! `krec rbac`: the least-privilege ClusterRole (and its binding) a host needs to run a set of
//! guests — the union of the guests' `permissions` and what the host itself does for them.
//!
//! The host needs, beyond the guests' own verbs:
//! - `list` and `watch` on every kind a guest watches (`for`, `owns`, `watches`) and on every
//!   kind a guest may `get` or `list` through the cache (the cache watches it on first use),
//!   except kinds marked `uncached`;
//! - `get`, `list`, `create`, `update`, `delete` on `coordination.k8s.io` leases, for leader
//!   election and sharding (`--shard` lists the group's Leases and deletes its own at exit);
//! - `create` and `patch` on core `events`, where guests record Events;
//! - `get`, `list` and `watch` on `krec.dev` `reconcilers` and `clusterreconcilers`, and
//!   `patch` on their `status`, for guests registered as objects (`--from-cluster`).
//!
//! `update-status` and `patch-status` become `update` and `patch` on the `…/status`
//! subresource. Kinds are mapped to resources with the built-in table and the CRDs found in
//! the manifest directory; a kind found in neither is named by the usual lower-case plural,
//! with a comment saying so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use crate::manifest::{Manifest, Verb};
use crate::vocab::Gvk;

/// One rule's key: API group and resource (with `/status` for the subresource).
type Resource = (String, String);

/// Who the generated role is bound to.
#[derive(Clone, Debug)]
pub struct Subject {
    /// Name of the ClusterRole and ClusterRoleBinding.
    pub name: String,
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
}

/// The resources that CRDs beside the manifests define: group and kind → plural.
type CrdPlurals = BTreeMap<(String, String), String>;

/// A CRD's `spec.group`, `spec.names.kind` and `spec.names.plural`.
fn crd_names(crd: &Value) -> Option<(&str, &str, &str)> {
    let field = |pointer: &str| crd.pointer(pointer).and_then(Value::as_str);
    Some((
        field("/spec/group")?,
        field("/spec/names/kind")?,
        field("/spec/names/plural")?,
    ))
}

/// The resource (plural) of `gvk` — a built-in kind's, a CRD's or a guess — and whether it was
/// guessed.
fn plural(crds: &CrdPlurals, gvk: &Gvk) -> (String, bool) {
    if let Some(builtin) = krec_core::kinds::builtin(&gvk.group, &gvk.kind) {
        return (builtin.plural.to_owned(), false);
    }
    match crds.get(&(gvk.group.clone(), gvk.kind.clone())) {
        Some(plural) => (plural.clone(), false),
        None => {
            let lower = gvk.kind.to_lowercase();
            let guess = if lower.ends_with('s') {
                format!("{lower}es")
            } else if let Some(stem) = lower.strip_suffix('y') {
                format!("{stem}ies")
            } else {
                format!("{lower}s")
            };
            (guess, true)
        }
    }
}

/// Why the RBAC could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// A CRD beside the manifests cannot be read.
    #[error(transparent)]
    Crds(#[from] crate::objects::ObjectFileError),
    /// The YAML could not be written.
    #[error("writing the RBAC as YAML: {0}")]
    Encode(serde_yaml_ng::Error),
}

/// The ClusterRole and ClusterRoleBinding for `manifests`, as YAML documents. CRDs under
/// `crd_dir` (if given) name their kinds' resources.
///
/// # Errors
///
/// When a CRD under `crd_dir` cannot be read.
pub fn generate(
    manifests: &[Manifest],
    crd_dir: Option<&Path>,
    subject: &Subject,
) -> Result<String, RbacError> {
    // krec's own kinds, which the host reads with --from-cluster.
    let mut crds: CrdPlurals = crate::manifest::crd::crds()
        .iter()
        .filter_map(crd_names)
        .map(|(group, kind, plural)| ((group.to_owned(), kind.to_owned()), plural.to_owned()))
        .collect();
    if let Some(dir) = crd_dir {
        for crd in crate::objects::read_objects(dir)?
            .into_iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
        {
            let Some((group, kind, plural)) = crd_names(&crd) else {
                return Err(crate::objects::ObjectFileError::new(
                    dir,
                    format!(
                        "CRD {}: spec.group, spec.names.kind and spec.names.plural are required",
                        crd["metadata"]["name"]
                    ),
                )
                .into());
            };
            let name = crd.pointer("/metadata/name").and_then(Value::as_str);
            if name != Some(format!("{plural}.{group}").as_str()) {
                return Err(crate::objects::ObjectFileError::new(
                    dir,
                    format!(
                        "CRD {}: metadata.name must be spec.names.plural + \".\" + spec.group \
                         ({plural}.{group})",
                        crd["metadata"]["name"]
                    ),
                )
                .into());
            }
            crds.insert((group.to_owned(), kind.to_owned()), plural.to_owned());
        }
    }
    let mut rules: BTreeMap<Resource, BTreeSet<&'static str>> = BTreeMap::new();
    let mut guessed: BTreeSet<String> = BTreeSet::new();
    let mut add = |gvk: &Gvk, sub: &str, verbs: &[&'static str]| {
        let (resource, guess) = plural(&crds, gvk);
        if guess {
            guessed.insert(format!("{gvk} -> {resource}"));
        }
        let resource = if sub.is_empty() {
            resource
        } else {
            format!("{resource}/{sub}")
        };
        rules
            .entry((gvk.group.clone(), resource))
            .or_default()
            .extend(verbs.iter().copied());
    };
    for manifest in manifests {
        let spec = &manifest.spec;
        let uncached: BTreeSet<Gvk> = spec.uncached.iter().map(|k| k.gvk()).collect();
        let handlers = crate::controller::Handlers::from_manifest(manifest);
        for gvk in handlers.watched_kinds() {
            add(&gvk, "", &["get", "list", "watch"]);
        }
        for permission in &spec.permissions {
            let gvk = Gvk::from_api_version(&permission.api_version, &permission.kind);
            for verb in &permission.verbs {
                let (name, sub) = verb.rbac();
                add(&gvk, sub.unwrap_or_default(), &[name]);
                if matches!(verb, Verb::Get | Verb::List) && !uncached.contains(&gvk) {
                    // Reads are served by an informer, which lists and watches.
                    add(&gvk, "", &["list", "watch"]);
                }
            }
        }
    }
    add(
        &Gvk::new("coordination.k8s.io", "v1", "Lease"),
        "",
        &["get", "list", "create", "update", "delete"],
    );
    add(&Gvk::new("", "v1", "Event"), "", &["create", "patch"]);
    for gvk in [
        crate::sources::reconciler_gvk(),
        crate::sources::cluster_reconciler_gvk(),
    ] {
        add(&gvk, "", &["get", "list", "watch"]);
        add(&gvk, "status", &["patch"]);
    }
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|((group, resource), verbs)| {
            json!({"apiGroups": [group], "resources": [resource], "verbs": verbs})
        })
        .collect();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": subject.name},
        "rules": rules,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": subject.name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": subject.name},
        "subjects": [{"kind": "ServiceAccount", "name": subject.service_account, "namespace": subject.namespace}],
    });
    let mut out = String::from(
        "# Generated by `krec rbac`: the guests' permissions plus what the host needs.\n",
    );
    for guess in &guessed {
        out.push_str(&format!(
            "# resource name guessed (no CRD found for the kind): {guess}\n"
        ));
    }
    for (i, doc) in [role, binding].iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(doc).map_err(RbacError::Encode)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_role_should_be_the_union_of_permissions_and_host_needs() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests");
        let manifests: Vec<Manifest> = Manifest::scan_dir(&dir)
            .expect("scan")
            .into_iter()
            .map(|m| m.expect("valid sample manifest"))
            .collect();
        let subject = Subject {
            name: "krec".into(),
            namespace: "krec-system".into(),
            service_account: "krec".into(),
        };
        let yaml = generate(&manifests, Some(&dir), &subject).expect("rbac");
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
            .collect();
        let rules = docs[0]["rules"].as_array().expect("rules");
        let verbs = |group: &str, resource: &str| -> Vec<String> {
            rules
                .iter()
                .find(|r| r["apiGroups"][0] == group && r["resources"][0] == resource)
                .map(|r| {
                    r["verbs"]
                        .as_array()
                        .expect("verbs")
                        .iter()
                        .map(|v| v.as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            verbs("apps", "replicasets"),
            ["get", "list", "update", "watch"]
        );
        assert_eq!(verbs("", "pods"), ["get", "list", "watch"]);
        assert_eq!(
            verbs("samplecontroller.k8s.io", "foos/status"),
            ["update"],
            "update-status is the status subresource"
        );
        assert_eq!(
            verbs("apps", "deployments"),
            ["create", "get", "list", "update", "watch"]
        );
        assert_eq!(
            verbs("coordination.k8s.io", "leases"),
            ["create", "delete", "get", "list", "update"]
        );
        assert_eq!(verbs("", "events"), ["create", "patch"]);
        assert_eq!(verbs("krec.dev", "reconcilers"), ["get", "list", "watch"]);
        assert_eq!(verbs("krec.dev", "clusterreconcilers/status"), ["patch"]);
        assert!(verbs("", "secrets").is_empty(), "nothing nobody asked for");
        assert!(!yaml.contains("guessed"), "every kind resolved: {yaml}");
        assert_eq!(docs[1]["subjects"][0]["namespace"], "krec-system");
    }
}
