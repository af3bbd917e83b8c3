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
    // A rule over each element `x` of `spec.<list>`: the expression, and the field the message
    // names — `spec.<list>[i]<suffix>`, `i` the first element refused, as the host's own check
    // (`confine`) names it.
    let each = |list: &str, ok: &str, suffix: &str| {
        (
            format!("!('{list}' in object.spec) || object.spec.{list}.all(x, {ok})"),
            format!(
                "spec.{list}[' + string(object.spec.{list}.map(x, {ok}).indexOf(false)) + ']{suffix}"
            ),
        )
    };
    let not_cluster_scoped = format!("!({} in variables.clusterScoped)", group_kind("x"));
    let own_namespace = |field: &str| {
        format!("!('namespace' in {field}) || {field}['namespace'] == object.metadata.namespace")
    };
    let (own_namespaces, own_namespaces_field) = each(
        "permissions",
        "!('namespaces' in x) || x.namespaces.all(n, n == object.metadata.namespace)",
        ".namespaces",
    );
    let mut rules = vec![
        (
            "!('namespaces' in object.spec) || object.spec.namespaces.all(n, n == object.metadata.namespace)".to_owned(),
            elsewhere("spec.namespaces"),
        ),
        (own_namespaces, elsewhere(&own_namespaces_field)),
        (
            format!(
                "!('for' in object.spec) || !({} in variables.clusterScoped)",
                group_kind("object.spec['for']")
            ),
            scoped("spec.for"),
        ),
    ];
    for list in ["owns", "watches", "permissions", "uncached"] {
        let (expression, field) = each(list, &not_cluster_scoped, "");
        rules.push((expression, scoped(&field)));
    }
    let (expression, field) = each(
        "watches",
        "!('mapToNamespace' in x) || !x.mapToNamespace",
        ".mapToNamespace",
    );
    rules.push((
        expression,
        format!("'{field}: maps to cluster-scoped requests: a Reconciler keeps its requests in its namespace'"),
    ));
    for (list, field, suffix) in [
        ("watches", "x.mapTo", ".mapTo.namespace"),
        ("watches", "x.mapByLabel", ".mapByLabel.namespace"),
        ("watches", "x.mapByAnnotation", ".mapByAnnotation.namespace"),
        ("tickers", "x.request", ".request.namespace"),
    ] {
        let key = field.rsplit('.').next().unwrap_or(field);
        let ok = match key {
            "request" => own_namespace(field),
            // A mapTo without a namespace names a cluster-scoped request.
            "mapTo" => "!('mapTo' in x) || ('namespace' in x.mapTo && x.mapTo['namespace'] == object.metadata.namespace)".to_owned(),
            _ => format!("!('{key}' in x) || ({})", own_namespace(field)),
        };
        let (expression, field) = each(list, &ok, suffix);
        rules.push((expression, elsewhere(&field)));
    }
    rules.push((
        "!('conversion' in object.spec)".to_owned(),
        "'spec.conversion: the conversion webhook of a CRD serves the whole cluster: a Reconciler may not serve one (a ClusterReconciler may)'".to_owned(),
    ));
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
