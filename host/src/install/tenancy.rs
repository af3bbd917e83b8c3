//! The objects that confine namespaced `Reconciler`s at admission and give namespace admins
//! their rights: the same rules
//! [`confine`](crate::manifest::tenancy::confine) applies when a guest loads.

use serde_json::{Value, json};

/// The name of the ValidatingAdmissionPolicy (and its binding) that confines `Reconciler`s.
pub const POLICY_NAME: &str = "krec-reconciler-tenancy";

/// The ValidatingAdmissionPolicy and its binding that refuse, when a `Reconciler` is created or
/// changed, what [`confine`](crate::manifest::tenancy::confine) would refuse when it loads: the same fields, the same reasons, so
/// `kubectl apply` says at once what the host would only report in the object's status. (Kinds
/// from CRDs are the host's to check: a policy cannot know their scope.)
pub fn admission_policy() -> Vec<Value> {
    let cluster_scoped: Vec<String> = krec_core::kinds::BUILTIN_KINDS
        .iter()
        .filter(|k| k.scope == krec_core::kinds::Scope::Cluster)
        .map(|k| format!("{}/{}", k.group, k.kind))
        .collect();
    // `group/Kind` of a kind reference `r`.
    let group_kind = |r: &str| {
        format!(
            "((({r}).apiVersion.contains('/') ? ({r}).apiVersion.split('/')[0] : '') + '/' + ({r}).kind)"
        )
    };
    let elsewhere = |field: &str| {
        format!(
            "'{field}: a Reconciler in ' + object.metadata.namespace + ' may only use its own \
             namespace (a ClusterReconciler may use others)'"
        )
    };
    let scoped = |field: &str| {
        format!(
            "'{field}: a cluster-scoped kind: a Reconciler may only use namespaced kinds (a \
             ClusterReconciler may use cluster-scoped ones)'"
        )
    };
    let kinds_in = |list: &str| {
        format!(
            "!('{list}' in object.spec) || object.spec.{list}.all(r, !({} in variables.clusterScoped))",
            group_kind("r")
        )
    };
    let rules = [
        (
            "!('namespaces' in object.spec) || object.spec.namespaces.all(n, n == object.metadata.namespace)".to_owned(),
            elsewhere("spec.namespaces"),
        ),
        (
            "!('permissions' in object.spec) || object.spec.permissions.all(p, !('namespaces' in p) || p.namespaces.all(n, n == object.metadata.namespace))".to_owned(),
            elsewhere("spec.permissions[].namespaces"),
        ),
        (
            format!(
                "!('for' in object.spec) || !({} in variables.clusterScoped)",
                group_kind("object.spec['for']")
            ),
            scoped("spec.for"),
        ),
        (kinds_in("owns"), scoped("spec.owns[]")),
        (kinds_in("watches"), scoped("spec.watches[]")),
        (kinds_in("permissions"), scoped("spec.permissions[]")),
        (kinds_in("uncached"), scoped("spec.uncached[]")),
        (
            "!('watches' in object.spec) || object.spec.watches.all(w, !('mapToNamespace' in w) || !w.mapToNamespace)".to_owned(),
            "'spec.watches[].mapToNamespace: maps to cluster-scoped requests: a Reconciler keeps its requests in its namespace'".to_owned(),
        ),
        (
            "!('watches' in object.spec) || object.spec.watches.all(w, !('mapTo' in w) || ('namespace' in w.mapTo && w.mapTo['namespace'] == object.metadata.namespace))".to_owned(),
            elsewhere("spec.watches[].mapTo.namespace"),
        ),
        (
            "!('watches' in object.spec) || object.spec.watches.all(w, ['mapByLabel', 'mapByAnnotation'].all(k, !(k in w) || !('namespace' in w[k]) || w[k]['namespace'] == object.metadata.namespace))".to_owned(),
            elsewhere("spec.watches[].mapByLabel.namespace"),
        ),
        (
            "!('tickers' in object.spec) || object.spec.tickers.all(t, !('namespace' in t.request) || t.request['namespace'] == object.metadata.namespace)".to_owned(),
            elsewhere("spec.tickers[].request.namespace"),
        ),
        (
            "!('conversion' in object.spec)".to_owned(),
            "'spec.conversion: the conversion webhook of a CRD serves the whole cluster: a Reconciler may not serve one (a ClusterReconciler may)'".to_owned(),
        ),
    ];
    let validations: Vec<Value> = rules
        .into_iter()
        .map(|(expression, message)| {
            json!({"expression": expression, "messageExpression": message, "reason": "Invalid"})
        })
        .collect();
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [crate::manifest::API_VERSION.split('/').next().unwrap_or_default()],
                "apiVersions": ["*"],
                "resources": ["reconcilers"],
                "operations": ["CREATE", "UPDATE"],
                // Written as the server defaults it, so that applying this again changes nothing.
                "scope": "*",
            }]},
            "variables": [{
                "name": "clusterScoped",
                "expression": serde_json::to_string(&cluster_scoped).unwrap_or_default(),
            }],
            "validations": validations,
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    });
    vec![policy, binding]
}

/// ClusterRoles that aggregate `Reconciler` rights into Kubernetes' default `admin`, `edit`
/// and `view` roles, as Kubernetes does for its own namespaced kinds: whoever may edit a
/// namespace may register guests in it (confined to it); `ClusterReconciler`s stay with
/// cluster administrators (`cluster-admin`).
pub fn aggregated_roles() -> Vec<Value> {
    let group = crate::manifest::API_VERSION
        .split('/')
        .next()
        .unwrap_or_default();
    let role = |name: &str, labels: Value, verbs: &[&str]| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": [
                {"apiGroups": [group], "resources": ["reconcilers"], "verbs": verbs},
                {"apiGroups": [group], "resources": ["reconcilers/status"], "verbs": ["get"]},
            ],
        })
    };
    vec![
        role(
            "krec-reconcilers-edit",
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true",
                "rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
        ),
        role(
            "krec-reconcilers-view",
            json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
            &["get", "list", "watch"],
        ),
    ]
}
