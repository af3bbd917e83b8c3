//! The facts of Kubernetes' built-in kinds: group, version, plural, scope, subresources, short
//! names — one table, so that the host, the guest SDK and the embedded API server give one answer
//! to "is this kind cluster-scoped?". Kinds that custom resource definitions add are learned from
//! discovery, not from here.

/// Whether a kind's objects live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In a namespace.
    Namespaced,
    /// Cluster-wide.
    Cluster,
}

/// What krec knows of one built-in kind (its preferred version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltinKind {
    /// API group, `""` for core.
    pub group: &'static str,
    /// Preferred version.
    pub version: &'static str,
    /// Kind, CamelCase.
    pub kind: &'static str,
    /// The resource: the URL segment, e.g. `replicasets`.
    pub plural: &'static str,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Short names kubectl accepts, e.g. `rs`.
    pub short_names: &'static [&'static str],
    /// Whether `/status` is a subresource.
    pub status: bool,
    /// Whether `/scale` is a subresource (at `spec.replicas`, `status.replicas`,
    /// `status.selector`).
    pub scale: bool,
    /// Whether it is in the `all` category (`kubectl get all`).
    pub in_all: bool,
    /// Whether the embedded API server serves it.
    pub served: bool,
    /// Whether it is a request answered, not an object kept: only `create` is served (the
    /// access reviews, `SelfSubjectReview`, `TokenReview`).
    pub create_only: bool,
}

impl BuiltinKind {
    /// Whether its objects live in a namespace.
    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        scope: Scope,
    ) -> Self {
        BuiltinKind {
            group,
            version,
            kind,
            plural,
            scope,
            short_names: &[],
            status: false,
            scale: false,
            in_all: false,
            served: true,
            create_only: false,
        }
    }

    const fn short(mut self, names: &'static [&'static str]) -> Self {
        self.short_names = names;
        self
    }

    const fn status(mut self) -> Self {
        self.status = true;
        self
    }

    const fn scale(mut self) -> Self {
        self.scale = true;
        self
    }

    const fn in_all(mut self) -> Self {
        self.in_all = true;
        self
    }

    const fn create_only(mut self) -> Self {
        self.create_only = true;
        self
    }

    const fn not_served(mut self) -> Self {
        self.served = false;
        self
    }
}

const fn namespaced(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
) -> BuiltinKind {
    BuiltinKind::new(group, version, kind, plural, Scope::Namespaced)
}

const fn cluster(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
) -> BuiltinKind {
    BuiltinKind::new(group, version, kind, plural, Scope::Cluster)
}

/// Kubernetes' built-in kinds: those the embedded API server serves, then the cluster-scoped
/// ones it does not serve (so that a manifest's permission on them is still checked for scope).
pub const BUILTIN_KINDS: &[BuiltinKind] = &[
    cluster("", "v1", "Namespace", "namespaces")
        .short(&["ns"])
        .status(),
    namespaced("", "v1", "Pod", "pods")
        .short(&["po"])
        .status()
        .in_all(),
    cluster("", "v1", "Node", "nodes").short(&["no"]).status(),
    namespaced("", "v1", "ConfigMap", "configmaps").short(&["cm"]),
    namespaced("", "v1", "Secret", "secrets"),
    namespaced("", "v1", "Service", "services")
        .short(&["svc"])
        .status()
        .in_all(),
    namespaced("", "v1", "ServiceAccount", "serviceaccounts").short(&["sa"]),
    namespaced("", "v1", "Event", "events").short(&["ev"]),
    namespaced("events.k8s.io", "v1", "Event", "events").short(&["ev"]),
    namespaced("apps", "v1", "Deployment", "deployments")
        .short(&["deploy"])
        .status()
        .scale()
        .in_all(),
    namespaced("apps", "v1", "ReplicaSet", "replicasets")
        .short(&["rs"])
        .status()
        .scale()
        .in_all(),
    namespaced("apps", "v1", "StatefulSet", "statefulsets")
        .short(&["sts"])
        .status()
        .scale()
        .in_all(),
    namespaced("apps", "v1", "DaemonSet", "daemonsets")
        .short(&["ds"])
        .status()
        .in_all(),
    namespaced("batch", "v1", "Job", "jobs").status().in_all(),
    namespaced("batch", "v1", "CronJob", "cronjobs")
        .short(&["cj"])
        .status()
        .in_all(),
    namespaced("", "v1", "ResourceQuota", "resourcequotas")
        .short(&["quota"])
        .status(),
    namespaced("", "v1", "LimitRange", "limitranges").short(&["limits"]),
    namespaced("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims")
        .short(&["pvc"])
        .status(),
    cluster("", "v1", "PersistentVolume", "persistentvolumes")
        .short(&["pv"])
        .status(),
    namespaced("", "v1", "Endpoints", "endpoints").short(&["ep"]),
    namespaced("", "v1", "ReplicationController", "replicationcontrollers")
        .short(&["rc"])
        .status()
        .scale()
        .in_all(),
    namespaced("apps", "v1", "ControllerRevision", "controllerrevisions"),
    namespaced(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    )
    .short(&["hpa"])
    .status()
    .in_all(),
    namespaced("networking.k8s.io", "v1", "Ingress", "ingresses")
        .short(&["ing"])
        .status(),
    cluster("networking.k8s.io", "v1", "IngressClass", "ingressclasses"),
    namespaced(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .short(&["netpol"]),
    namespaced(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    )
    .short(&["pdb"])
    .status(),
    cluster(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
    )
    .short(&["pc"]),
    cluster("storage.k8s.io", "v1", "StorageClass", "storageclasses").short(&["sc"]),
    namespaced("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    namespaced("coordination.k8s.io", "v1", "Lease", "leases"),
    namespaced("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    namespaced(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    ),
    cluster(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    ),
    cluster(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    ),
    cluster(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
    )
    .create_only(),
    cluster("authentication.k8s.io", "v1", "TokenReview", "tokenreviews").create_only(),
    namespaced(
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
    )
    .create_only(),
    cluster(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
    )
    .create_only(),
    cluster(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
    )
    .create_only(),
    cluster(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
    )
    .create_only(),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    ),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    ),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
    .status(),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
    ),
    cluster(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    ),
    cluster(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
    .short(&["crd", "crds"])
    .status(),
    cluster("", "v1", "ComponentStatus", "componentstatuses")
        .short(&["cs"])
        .not_served(),
    cluster("apiregistration.k8s.io", "v1", "APIService", "apiservices")
        .status()
        .not_served(),
    cluster("storage.k8s.io", "v1", "CSIDriver", "csidrivers").not_served(),
    cluster("storage.k8s.io", "v1", "CSINode", "csinodes").not_served(),
    cluster(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
    )
    .status()
    .not_served(),
    cluster(
        "storage.k8s.io",
        "v1",
        "VolumeAttributesClass",
        "volumeattributesclasses",
    )
    .short(&["vac"])
    .not_served(),
    cluster("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses").not_served(),
    cluster("networking.k8s.io", "v1", "IPAddress", "ipaddresses")
        .short(&["ip"])
        .not_served(),
    cluster("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs")
        .status()
        .not_served(),
    cluster(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
    )
    .short(&["csr"])
    .status()
    .not_served(),
    cluster(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
    )
    .status()
    .not_served(),
    cluster(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
    )
    .status()
    .not_served(),
    cluster("resource.k8s.io", "v1", "DeviceClass", "deviceclasses").not_served(),
    cluster("resource.k8s.io", "v1", "ResourceSlice", "resourceslices").not_served(),
];

/// The built-in kind `kind` of `group` (any version), if Kubernetes has one.
pub fn builtin(group: &str, kind: &str) -> Option<&'static BuiltinKind> {
    BUILTIN_KINDS
        .iter()
        .find(|k| k.group == group && k.kind == kind)
}

/// Whether `kind` of `group` is one of Kubernetes' own cluster-scoped kinds.
pub fn is_builtin_cluster_scoped(group: &str, kind: &str) -> bool {
    builtin(group, kind).is_some_and(|k| k.scope == Scope::Cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_should_be_listed_once_with_its_facts() {
        for (i, a) in BUILTIN_KINDS.iter().enumerate() {
            assert!(
                BUILTIN_KINDS[i + 1..]
                    .iter()
                    .all(|b| (a.group, a.kind) != (b.group, b.kind)),
                "{} {} twice",
                a.group,
                a.kind
            );
        }
        let pod = builtin("", "Pod").expect("Pod");
        assert_eq!(
            (pod.version, pod.plural, pod.namespaced()),
            ("v1", "pods", true)
        );
        assert!(builtin("apps", "Deployment").is_some_and(|d| d.scale && d.status && d.in_all));
        assert!(is_builtin_cluster_scoped("", "Namespace"));
        assert!(is_builtin_cluster_scoped(
            "certificates.k8s.io",
            "CertificateSigningRequest"
        ));
        assert!(!is_builtin_cluster_scoped("", "ConfigMap"));
        assert!(
            !is_builtin_cluster_scoped("example.com", "Foo"),
            "custom kinds: discovery"
        );
    }
}
