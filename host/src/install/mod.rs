//! `krec install`: everything a cluster needs to run krec, as `kubectl apply -f` input — krec's
//! API (the CRDs, their admission policy, the roles aggregating `Reconciler` rights into
//! `admin`/`edit`/`view`), the host's namespace, ServiceAccount and RBAC, its Deployment
//! (sharded replicas reading guests from the cluster) and its Services. `deploy/krec.yaml` is
//! this output for the sample guests; a test keeps them equal.

pub mod crds;
pub mod rbac;
pub mod tenancy;

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::cluster::client::ApiClient;
use crate::install::rbac::{RbacError, Subject};
use crate::manifest::Manifest;
use crate::manifest::tenancy::TenantQuota;
use krec_core::{CallError, describe};

/// The host's name: its ServiceAccount, ClusterRole, Deployment and Services are named after it.
const NAME: &str = "krec";

/// What to install.
#[derive(Clone, Debug)]
pub struct Install {
    /// The host's namespace.
    pub namespace: String,
    /// The host's image.
    pub image: String,
    /// Replicas sharing the guests.
    pub replicas: u32,
    /// An image of guest manifests and modules (deploy/Containerfile's `guests` target) copied
    /// into `/guests` by an init container; `None`: guests come from the cluster's objects only.
    pub guests_image: Option<String>,
    /// Guests whose permissions the host's ClusterRole covers (their CRDs beside them name their
    /// kinds' resources).
    pub manifests: Vec<Manifest>,
    /// Where `manifests` were read from.
    pub manifests_dir: Option<PathBuf>,
    /// ClusterRoles bound to the host besides its own (e.g. `view`, `edit`): what the guests
    /// registered in the cluster may be allowed.
    pub grants: Vec<String>,
    /// What each namespace's guests may use together.
    pub tenant_quota: Option<TenantQuota>,
    /// More `krec run` flags for the host (e.g. `--insecure-registry=registry.local:5000`),
    /// after the ones the install sets.
    pub host_args: Vec<String>,
}

impl Default for Install {
    fn default() -> Self {
        Install {
            namespace: "krec-system".into(),
            image: "krec:dev".into(),
            replicas: 3,
            guests_image: None,
            manifests: Vec::new(),
            manifests_dir: None,
            grants: Vec::new(),
            tenant_quota: None,
            host_args: Vec::new(),
        }
    }
}

impl Install {
    /// Every object, in the order `kubectl apply -f` should create them.
    ///
    /// # Errors
    ///
    /// When a CRD beside the manifests cannot be read.
    pub fn objects(&self) -> Result<Vec<Value>, RbacError> {
        let ns = self.namespace.as_str();
        let mut objects = crate::install::crds::api_objects();
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": ns}}));
        let subject = Subject {
            name: NAME.into(),
            namespace: ns.into(),
            service_account: NAME.into(),
        };
        let rbac = crate::install::rbac::objects(
            &self.manifests,
            self.manifests_dir.as_deref(),
            &subject,
        )?;
        objects.push(rbac.role);
        objects.push(rbac.binding);
        // The webhook CA the replicas share, in their own namespace only.
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": NAME, "namespace": ns},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": [crate::admission::tls::CA_SECRET], "verbs": ["get"]},
            ],
        }));
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": NAME, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
        }));
        for role in &self.grants {
            objects.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{NAME}-{role}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
            }));
        }
        objects.push(self.deployment());
        for (name, port, target) in [("admin", 8080, "admin"), ("webhooks", 443, "webhook")] {
            objects.push(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": format!("{NAME}-{name}"), "namespace": ns},
                "spec": {
                    "selector": {"app.kubernetes.io/name": NAME},
                    "ports": [{"name": target, "port": port, "targetPort": target}],
                },
            }));
        }
        Ok(objects)
    }

    fn deployment(&self) -> Value {
        let restricted = json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
        });
        let mut args = vec!["run".to_owned()];
        if self.guests_image.is_some() {
            args.push("--manifests=/guests".into());
        }
        args.extend(
            [
                "--from-cluster",
                "--module-dir=/guests",
                "--admin-addr=0.0.0.0:8080",
                "--admin-token-file=/etc/krec/token",
                "--shard",
            ]
            .map(str::to_owned),
        );
        // Where the shard group's Leases live.
        args.push(format!("--leader-elect-namespace={}", self.namespace));
        args.extend(["--log-format=json", "--webhook-addr=0.0.0.0:9443"].map(str::to_owned));
        // The guests' webhooks registered behind the Service, trusting the CA the replicas
        // keep in the Secret krec-webhook-ca.
        args.push(format!(
            "--webhook-service={}/{NAME}-webhooks:443",
            self.namespace
        ));
        if let Some(quota) = &self.tenant_quota {
            args.push(format!("--tenant-quota={quota}"));
        }
        args.extend(self.host_args.iter().cloned());
        let mut pod = json!({
            "serviceAccountName": NAME,
            // --shutdown-timeout (30s) plus a margin.
            "terminationGracePeriodSeconds": 40,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": NAME,
                "image": self.image,
                "args": args,
                "env": [{"name": "KREC_NAMESPACE",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                "ports": [
                    {"name": "admin", "containerPort": 8080},
                    {"name": "webhook", "containerPort": 9443},
                ],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "admin"}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, "periodSeconds": 5},
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "512Mi"},
                },
                "securityContext": restricted,
                "volumeMounts": [
                    {"name": "guests", "mountPath": "/guests", "readOnly": true},
                    {"name": "token", "mountPath": "/etc/krec", "readOnly": true},
                    {"name": "module-cache", "mountPath": "/var/cache/krec"},
                ],
            }],
            "volumes": [
                {"name": "guests", "emptyDir": {}},
                {"name": "token", "secret": {"secretName": "krec-admin-token",
                    "items": [{"key": "token", "path": "token"}]}},
                {"name": "module-cache", "emptyDir": {}},
            ],
        });
        if let Some(image) = &self.guests_image {
            pod["initContainers"] = json!([{
                "name": "guests",
                "image": image,
                "command": ["sh", "-c", "cp -r /guests/. /mnt/guests/"],
                "volumeMounts": [{"name": "guests", "mountPath": "/mnt/guests"}],
                "securityContext": restricted,
            }]);
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": NAME}},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                "template": {
                    "metadata": {
                        "labels": {"app.kubernetes.io/name": NAME},
                        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
                    },
                    "spec": pod,
                },
            },
        })
    }

    /// [`objects`](Self::objects) as one YAML stream, with a header saying what it is and what
    /// is left to do.
    ///
    /// # Errors
    ///
    /// When a CRD beside the manifests cannot be read, or the YAML cannot be written.
    pub fn yaml(&self) -> Result<String, RbacError> {
        let ns = &self.namespace;
        let mut out = format!(
            "# krec in a cluster, as `krec install` prints it: krec's API (the Reconciler and\n\
             # ClusterReconciler CRDs, the admission policy confining Reconcilers to their namespace,\n\
             # the roles giving namespace admins and editors Reconcilers), the host's namespace,\n\
             # ServiceAccount and RBAC, and {replicas} replicas sharing the guests (`--shard`), which\n\
             # they read from the cluster's Reconciler objects (`--from-cluster`).\n\
             #\n\
             #   krec install | kubectl apply -f -\n\
             #   kubectl -n {ns} create secret generic krec-admin-token --from-literal=token=\"$(openssl rand -hex 32)\"\n\
             #\n\
             # The replicas register their guests' webhooks themselves, behind the Service\n\
             # {ns}/krec-webhooks, trusting a CA they keep in the Secret {ns}/krec-webhook-ca.\n",
            replicas = self.replicas,
        );
        for object in self.objects()? {
            out.push_str("---\n");
            out.push_str(&serde_yaml_ng::to_string(&object).map_err(RbacError::Encode)?);
        }
        Ok(out)
    }
}

/// Create `objects` through the API: CRDs first (so their kinds are served), then namespaces,
/// then the rest in order. An object given more than once (a sample extending another's CRD) is
/// created from its last definition. Objects that exist already are left as they are. Returns
/// one line per object that could not be applied.
pub async fn apply_objects(api: &ApiClient, objects: Vec<Value>) -> Vec<String> {
    let rank = |o: &Value| match o.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    };
    let identity = |o: &Value| {
        let text = |pointer: &str| {
            o.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let group = text("/apiVersion").map(|v| {
            v.rsplit_once('/')
                .map_or(String::new(), |(g, _)| g.to_owned())
        });
        Some((
            group?,
            text("/kind")?,
            text("/metadata/namespace"),
            text("/metadata/name")?,
        ))
    };
    let mut last = std::collections::HashMap::new();
    for (i, object) in objects.iter().enumerate() {
        if let Some(id) = identity(object) {
            last.insert(id, i);
        }
    }
    let mut objects: Vec<Value> = objects
        .into_iter()
        .enumerate()
        .filter(|(i, o)| identity(o).is_none_or(|id| last.get(&id) == Some(i)))
        .map(|(_, o)| o)
        .collect();
    objects.sort_by_key(rank);
    let mut problems = Vec::new();
    for object in objects {
        let what = describe(&object);
        let object = with_last_applied(object);
        match api.create(&object, "krec-dev").await.map(drop) {
            Ok(()) | Err(CallError::AlreadyExists(_)) => tracing::info!("applied {what}"),
            Err(err) => problems.push(format!("{what}: {err}")),
        }
    }
    problems
}

/// kubectl's record of what was last applied, which `kubectl apply` (client-side) diffs against.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `object` as `kubectl create --save-config` (or a first `kubectl apply`) writes it: its own
/// JSON — keys sorted, a newline at the end, as kubectl encodes it — in [`LAST_APPLIED`], so that
/// a later `kubectl apply` of the same file patches it, without a warning that the annotation
/// is missing. An object without `metadata` is left as it is (the create refuses it).
fn with_last_applied(mut object: Value) -> Value {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return object;
    };
    // The configuration is the object as given, without the annotation itself.
    if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.remove("annotations");
        }
    }
    let configuration = format!("{object}\n");
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(annotations) = meta
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    {
        annotations.insert(LAST_APPLIED.to_owned(), Value::String(configuration));
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_examples_should_carry_kubectls_last_applied_configuration() {
        let object = json!({
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "a", "namespace": "default"},
            "data": {"k": "v"},
        });
        let applied = with_last_applied(object);
        // As `kubectl create --save-config` writes it: keys sorted, a newline at the end.
        assert_eq!(
            applied["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"v1\",\"data\":{\"k\":\"v\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\",\"namespace\":\"default\"}}\n"
        );
        // Its own annotations stay, the stale record is replaced.
        let object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a", "annotations": {"x": "y", LAST_APPLIED: "old"}},
        });
        let applied = with_last_applied(object);
        assert_eq!(applied["metadata"]["annotations"]["x"], "y");
        assert_eq!(
            applied["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{\"x\":\"y\"},\"name\":\"a\"}}\n"
        );
    }

    #[test]
    fn install_should_hold_the_api_the_host_and_its_rbac() {
        let install = Install {
            grants: vec!["view".into()],
            tenant_quota: Some("guests=5".parse().expect("quota")),
            host_args: vec!["--insecure-registry=registry.local:5000".into()],
            ..Default::default()
        };
        let objects = install.objects().expect("objects");
        let kinds: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        for expected in [
            "CustomResourceDefinition/reconcilers.krec.dev",
            "CustomResourceDefinition/clusterreconcilers.krec.dev",
            "ValidatingAdmissionPolicy/krec-reconciler-tenancy",
            "ClusterRole/krec-reconcilers-edit",
            "Namespace/krec-system",
            "ServiceAccount/krec",
            "ClusterRole/krec",
            "ClusterRoleBinding/krec",
            "ClusterRoleBinding/krec-view",
            "Deployment/krec",
            "Service/krec-admin",
            "Service/krec-webhooks",
        ] {
            assert!(kinds.iter().any(|k| k == expected), "{expected}: {kinds:?}");
        }
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("deployment");
        let pod = &deployment["spec"]["template"]["spec"];
        let args = pod["containers"][0]["args"].as_array().expect("args");
        assert!(args.contains(&json!("--from-cluster")));
        assert!(args.contains(&json!("--tenant-quota=guests=5")));
        assert_eq!(
            args.last(),
            Some(&json!("--insecure-registry=registry.local:5000"))
        );
        assert!(
            !args.contains(&json!("--manifests=/guests")),
            "no guest image: objects only"
        );
        assert!(pod.get("initContainers").is_none());
    }
}
