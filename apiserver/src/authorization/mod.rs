//! Whether a user may do what a request asks, as kube-apiserver's RBAC authorizer decides
//! (`plugin/pkg/auth/authorizer/rbac`): members of `system:masters` may do anything; anyone else
//! what the rules of the Roles and ClusterRoles bound to them (by user, group or ServiceAccount)
//! allow — a ClusterRoleBinding everywhere, a RoleBinding in its namespace; a ClusterRole with
//! an `aggregationRule` has the rules of the ClusterRoles it selects. A refusal is kube's 403
//! (`User "…" cannot list resource "pods" in API group "" in the namespace "demo"`).
//!
//! Requests to paths that are not resources (discovery, OpenAPI, `/version`, health,
//! `/metrics`) are authorized by `nonResourceURLs` rules, which kube's default policy
//! ([`bootstrap`]) grants: discovery to every user, `/metrics` to `system:monitoring`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::authentication::UserInfo;
use crate::store::Store;
use krec_core::ApiError;
use krec_core::json::Pointer;
use krec_core::selector::LabelSelector;

/// The group whose members may do anything.
pub const MASTERS: &str = "system:masters";

pub mod bootstrap;
pub mod escalation;

const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request on a resource asks, in RBAC's terms.
#[derive(Clone, Debug)]
pub struct Attributes<'a> {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, …
    pub verb: &'a str,
    /// The resource's API group (`""` for the core group).
    pub group: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// The subresource (`status`, `scale`), or `""`.
    pub subresource: &'a str,
    /// The namespace, or `None` for a cluster-scoped resource or a request across namespaces.
    pub namespace: Option<&'a str>,
    /// The object's name, or `None` for a collection.
    pub name: Option<&'a str>,
    /// The path of a request that is not on a resource (`/metrics`, `/apis`, `/healthz`),
    /// whose `verb` is the HTTP method's lower-cased: `nonResourceURLs` rules apply to it.
    pub path: Option<&'a str>,
}

impl<'a> Attributes<'a> {
    /// A request for `path`, no resource.
    pub fn non_resource(verb: &'a str, path: &'a str) -> Self {
        Attributes {
            verb,
            group: "",
            resource: "",
            subresource: "",
            namespace: None,
            name: None,
            path: Some(path),
        }
    }
}

/// May `user` do what `attributes` ask? `Ok` or kube's 403.
///
/// # Errors
///
/// The 403 Forbidden kube-apiserver answers.
pub fn authorize(
    store: &Store,
    user: &UserInfo,
    attributes: &Attributes<'_>,
) -> Result<(), ApiError> {
    if allows(store, user, attributes) {
        Ok(())
    } else {
        Err(forbidden(user, attributes))
    }
}

/// Whether `user` may do anything (a member of `system:masters`): no rule is read.
pub fn unrestricted(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

/// Whether `user` may do what `attributes` ask.
pub fn allows(store: &Store, user: &UserInfo, attributes: &Attributes<'_>) -> bool {
    if unrestricted(user) {
        return true;
    }
    allowed_by(store, user, attributes).is_some()
}

/// Why `user` may do what `attributes` ask, as an access review's `reason` gives it
/// (`RBAC: allowed by ClusterRoleBinding "…" of ClusterRole "…" to Group "…"`); `None` when it
/// may not. A member of `system:masters` is allowed with no reason.
pub fn allowed_by(store: &Store, user: &UserInfo, attributes: &Attributes<'_>) -> Option<String> {
    if unrestricted(user) || store.always_allows() {
        return Some(String::new());
    }
    let mut reason = None;
    visit_rules(store, user, attributes.namespace, |rule, binding| {
        if rule_allows(rule, attributes) {
            reason = Some(describe(binding, user));
        }
        reason.is_none()
    });
    reason
}

/// kube's description of the binding that allowed a request.
fn describe(binding: &Value, user: &UserInfo) -> String {
    let text = |pointer| {
        binding
            .at(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let namespace = text("/metadata/namespace");
    let with_namespace = |name: &str, ns: &str| {
        if ns.is_empty() {
            name.to_owned()
        } else {
            format!("{name}/{ns}")
        }
    };
    let kind = if namespace.is_empty() {
        "ClusterRoleBinding"
    } else {
        "RoleBinding"
    };
    let subject = binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|subject| binds_subject(subject, user, Some(namespace).filter(|n| !n.is_empty())))
        .map(|subject| {
            let name = subject["name"].as_str().unwrap_or_default();
            let kind = subject["kind"].as_str().unwrap_or_default();
            let name = if kind == "ServiceAccount" {
                let ns = subject["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(namespace);
                with_namespace(name, ns)
            } else {
                name.to_owned()
            };
            format!("{kind} {name:?}")
        })
        .unwrap_or_default();
    format!(
        "RBAC: allowed by {kind} {:?} of {} {:?} to {subject}",
        with_namespace(text("/metadata/name"), namespace),
        text("/roleRef/kind"),
        text("/roleRef/name"),
    )
}

/// Every rule that applies to `user` in `namespace` (`None`: cluster-wide only): the rules of
/// the ClusterRoles its ClusterRoleBindings bind, then of the roles the namespace's
/// RoleBindings bind — kube's `RulesFor`, what escalation checks and `SelfSubjectRulesReview`
/// read.
pub fn rules_for(store: &Store, user: &UserInfo, namespace: Option<&str>) -> Vec<Value> {
    let mut rules = Vec::new();
    visit_rules(store, user, namespace, |rule, _| {
        rules.push(rule.clone());
        true
    });
    rules
}

/// The rules of `kind` (`Role` or `ClusterRole`) `name` (a Role in `namespace`), with a
/// ClusterRole's aggregated rules; `None` when there is no such role.
pub fn role_rules(
    store: &Store,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Option<Vec<Value>> {
    let rt = store.registry().by_kind(RBAC, "v1", kind)?;
    match kind {
        "ClusterRole" => {
            let all = store.objects(&rt, None);
            let role = all.iter().find(|r| name_of(r) == Some(name))?;
            Some(rules_with_aggregation(role, &all))
        }
        _ => {
            let role = store.get(&rt, namespace, name).ok()?;
            Some(
                role.get("rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            )
        }
    }
}

fn name_of(object: &Value) -> Option<&str> {
    object.at("/metadata/name").and_then(Value::as_str)
}

/// Call `visit` with each rule that applies to `user` in `namespace` and the binding it comes
/// through, until it returns `false`.
fn visit_rules(
    store: &Store,
    user: &UserInfo,
    namespace: Option<&str>,
    mut visit: impl FnMut(&Value, &Value) -> bool,
) {
    let registry = store.registry();
    let kind = |kind: &str| registry.by_kind(RBAC, "v1", kind);
    let (Some(cluster_roles), Some(cluster_bindings), Some(roles), Some(bindings)) = (
        kind("ClusterRole"),
        kind("ClusterRoleBinding"),
        kind("Role"),
        kind("RoleBinding"),
    ) else {
        return;
    };
    let all_cluster_roles = store.objects(&cluster_roles, None);
    let rules_of_cluster_role = |name: &str| -> Vec<Value> {
        all_cluster_roles
            .iter()
            .find(|r| name_of(r) == Some(name))
            .map(|role| rules_with_aggregation(role, &all_cluster_roles))
            .unwrap_or_default()
    };
    for binding in store.objects(&cluster_bindings, None) {
        if !binds(&binding, user, None) {
            continue;
        }
        let rules = role_ref(&binding, "ClusterRole")
            .map(rules_of_cluster_role)
            .unwrap_or_default();
        if !rules.iter().all(|rule| visit(rule, &binding)) {
            return;
        }
    }
    let Some(namespace) = namespace else {
        return;
    };
    for binding in store.objects(&bindings, Some(namespace)) {
        if !binds(&binding, user, Some(namespace)) {
            continue;
        }
        let rules = match binding.at("/roleRef/kind").and_then(Value::as_str) {
            Some("ClusterRole") => role_ref(&binding, "ClusterRole")
                .map(rules_of_cluster_role)
                .unwrap_or_default(),
            Some("Role") => role_ref(&binding, "Role")
                .and_then(|name| store.get(&roles, Some(namespace), name).ok())
                .and_then(|role| role.get("rules").and_then(Value::as_array).cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if !rules.iter().all(|rule| visit(rule, &binding)) {
            return;
        }
    }
}

/// The name a binding's `roleRef` gives, if it refers to a `kind`.
fn role_ref<'a>(binding: &'a Value, kind: &str) -> Option<&'a str> {
    (binding.at("/roleRef/kind").and_then(Value::as_str) == Some(kind))
        .then(|| binding.at("/roleRef/name").and_then(Value::as_str))
        .flatten()
}

/// A ClusterRole's rules, and with an `aggregationRule` the rules of every ClusterRole its
/// selectors select — theirs aggregated too (`edit` takes in what aggregates into `view`) — in
/// the order of their names, each rule once, as kube's aggregation controller writes them.
fn rules_with_aggregation(role: &Value, all: &[Arc<Value>]) -> Vec<Value> {
    let mut rules = Vec::new();
    let mut seen = Vec::new();
    aggregate(role, all, &mut seen, &mut rules);
    rules
}

fn aggregate<'a>(
    role: &'a Value,
    all: &'a [Arc<Value>],
    seen: &mut Vec<&'a str>,
    rules: &mut Vec<Value>,
) {
    if let Some(name) = name_of(role) {
        if seen.contains(&name) {
            return;
        }
        seen.push(name);
    }
    for rule in role
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !rules.contains(rule) {
            rules.push(rule.clone());
        }
    }
    let selectors: Vec<LabelSelector> = role
        .at("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(LabelSelector::from_json)
        .collect();
    if selectors.is_empty() {
        return;
    }
    let mut selected: Vec<&Arc<Value>> = all
        .iter()
        .filter(|other| !std::ptr::eq(other.as_ref(), role))
        .filter(|other| selectors.iter().any(|s| s.matches_object(other)))
        .collect();
    selected.sort_by_key(|other| name_of(other));
    for other in selected {
        aggregate(other, all, seen, rules);
    }
}

/// Whether `binding` names `user` (by name, one of its groups, or — a ServiceAccount subject —
/// its ServiceAccount user); `namespace` is a RoleBinding's, the default of its ServiceAccount
/// subjects.
fn binds(binding: &Value, user: &UserInfo, namespace: Option<&str>) -> bool {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|subject| binds_subject(subject, user, namespace))
}

/// Whether one subject of a binding names `user`.
fn binds_subject(subject: &Value, user: &UserInfo, namespace: Option<&str>) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => user.username == name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .or(namespace);
            // A ServiceAccount subject names no one without a namespace.
            ns.is_some_and(|ns| {
                !ns.is_empty() && user.username == format!("system:serviceaccount:{ns}:{name}")
            })
        }
        _ => false,
    }
}

/// Whether one PolicyRule allows `attributes` (`*` matching anything in each list;
/// `resource/subresource` or `*/subresource` naming a subresource).
fn rule_allows(rule: &Value, attributes: &Attributes<'_>) -> bool {
    let list = |key: &str| -> Vec<&str> {
        rule.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let has = |key: &str, value: &str| list(key).iter().any(|v| *v == "*" || *v == value);
    if let Some(path) = attributes.path {
        // `/apis/*` covers everything under `/apis/`; `*` everything.
        return has("verbs", attributes.verb)
            && list("nonResourceURLs").iter().any(|url| {
                *url == path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| path.starts_with(prefix))
            });
    }
    let resource = if attributes.subresource.is_empty() {
        attributes.resource.to_owned()
    } else {
        format!("{}/{}", attributes.resource, attributes.subresource)
    };
    let resource_matches = list("resources").iter().any(|r| {
        *r == "*"
            || *r == resource
            || (!attributes.subresource.is_empty() && *r == format!("*/{}", attributes.subresource))
    });
    let names = list("resourceNames");
    let name_matches =
        names.is_empty() || attributes.name.is_some_and(|name| names.contains(&name));
    has("verbs", attributes.verb)
        && has("apiGroups", attributes.group)
        && resource_matches
        && name_matches
}

/// kube-apiserver's 403 for `user` asking `attributes`.
pub fn forbidden(user: &UserInfo, attributes: &Attributes<'_>) -> ApiError {
    if let Some(path) = attributes.path {
        let mut error = ApiError::forbidden(format!(
            "forbidden: User {:?} cannot {} path {path:?}",
            user.username, attributes.verb
        ));
        error.details = Some(json!({}));
        return error;
    }
    let resource = if attributes.subresource.is_empty() {
        attributes.resource.to_owned()
    } else {
        format!("{}/{}", attributes.resource, attributes.subresource)
    };
    let qualified = if attributes.group.is_empty() {
        attributes.resource.to_owned()
    } else {
        format!("{}.{}", attributes.resource, attributes.group)
    };
    let subject = match attributes.name {
        Some(name) => format!("{qualified} {name:?} is forbidden"),
        None => format!("{qualified} is forbidden"),
    };
    let scope = match attributes.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_owned(),
    };
    let message = format!(
        "{subject}: User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        user.username, attributes.verb, attributes.group
    );
    let mut error = ApiError::forbidden(message);
    let mut details = json!({"kind": attributes.resource});
    if !attributes.group.is_empty() {
        details["group"] = json!(attributes.group);
    }
    if let Some(name) = attributes.name {
        details["name"] = json!(name);
    }
    error.details = Some(details);
    error
}

/// The RBAC verb of an HTTP request on a resource path (a named GET is `get`, `watch` or not,
/// as kube-apiserver's request info has it).
pub fn verb(method: &str, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) if watch => "watch",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "",
    }
}

/// The attributes of a request on `resource` of `group`.
pub fn attributes<'a>(
    verb: &'a str,
    (group, resource): (&'a str, &'a str),
    subresource: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
) -> Attributes<'a> {
    // A Namespace is in itself, as kube-apiserver's request info has it: RoleBindings in it
    // apply to it.
    let namespace = if group.is_empty() && resource == "namespaces" {
        name.or(namespace)
    } else {
        namespace
    };
    Attributes {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
        path: None,
    }
}

/// The one name a list or watch asks for through `fieldSelector=metadata.name=…`, which
/// kube-apiserver authorizes as that name (so `resourceNames` rules allow `kubectl get pod x
/// -w`).
pub fn selected_name(field_selector: Option<&str>) -> Option<&str> {
    let selector = field_selector?.trim();
    let value = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    (!value.is_empty() && !value.contains(',')).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceTypes;

    fn store_with(objects: &[Value]) -> Store {
        let store = Store::new(Arc::new(ResourceTypes::new()));
        crate::store::ensure_namespaces(&store).expect("namespaces");
        for object in objects {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let rt = store
                .registry()
                .by_kind(group, version, object["kind"].as_str().unwrap_or_default())
                .expect("kind");
            let namespace = object.at("/metadata/namespace").and_then(Value::as_str);
            store
                .create(&rt, namespace, object.clone(), false)
                .expect("created");
        }
        store
    }

    fn sa(ns: &str, name: &str) -> UserInfo {
        UserInfo {
            username: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            ..Default::default()
        }
    }

    fn pods(verb: &'static str, namespace: Option<&'static str>) -> Attributes<'static> {
        Attributes {
            verb,
            group: "",
            resource: "pods",
            subresource: "",
            namespace,
            name: None,
            path: None,
        }
    }

    #[test]
    fn a_role_binding_should_allow_its_rules_in_its_namespace_only() {
        let store = store_with(&[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "reader", "namespace": "default"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "reader", "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader"}]}),
        ]);
        let reader = sa("default", "reader");
        assert!(allows(&store, &reader, &pods("list", Some("default"))));
        assert!(!allows(&store, &reader, &pods("delete", Some("default"))));
        assert!(!allows(&store, &reader, &pods("list", Some("kube-system"))));
        assert!(!allows(&store, &reader, &pods("list", None)));
        assert!(!allows(
            &store,
            &sa("other", "reader"),
            &pods("list", Some("default"))
        ));
        assert!(allows(&store, &UserInfo::admin(), &pods("delete", None)));
        assert_eq!(
            forbidden(&reader, &pods("list", Some("kube-system"))).message,
            r#"pods is forbidden: User "system:serviceaccount:default:reader" cannot list resource "pods" in API group "" in the namespace "kube-system""#
        );
        let named = Attributes {
            verb: "get",
            group: "apps",
            resource: "deployments",
            subresource: "scale",
            namespace: None,
            name: Some("web"),
            path: None,
        };
        assert_eq!(
            forbidden(&reader, &named).message,
            r#"deployments.apps "web" is forbidden: User "system:serviceaccount:default:reader" cannot get resource "deployments/scale" in API group "apps" at the cluster scope"#
        );
    }

    #[test]
    fn cluster_roles_should_aggregate_and_rules_should_match_as_kube_matches_them() {
        let store = store_with(&[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "monitoring"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-monitoring": "true"}}]}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "pods-status", "labels": {"aggregate-to-monitoring": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]},
                    {"apiGroups": ["*"], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["*"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "monitoring"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "monitoring"},
                "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "monitors"}]}),
        ]);
        let monitor = UserInfo {
            username: "mo".into(),
            groups: vec!["monitors".into()],
            ..Default::default()
        };
        let status = Attributes {
            subresource: "status",
            name: Some("p"),
            ..pods("get", Some("x"))
        };
        assert!(allows(&store, &monitor, &status));
        assert!(!allows(&store, &monitor, &pods("get", Some("x"))));
        let cm = |name| Attributes {
            resource: "configmaps",
            name,
            ..pods("update", Some("x"))
        };
        assert!(allows(&store, &monitor, &cm(Some("cfg"))));
        assert!(!allows(&store, &monitor, &cm(Some("other"))));
        assert!(
            !allows(&store, &monitor, &cm(None)),
            "resourceNames never match a collection"
        );
    }

    #[test]
    fn aggregation_should_reach_through_roles_that_aggregate() {
        let store = store_with(&[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "foo-view",
                    "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                "rules": [{"apiGroups": ["example.com"], "resources": ["foos"], "verbs": ["get"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "editor", "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "ed"}]}),
        ]);
        bootstrap::ensure_policy(&store).expect("default policy");
        let ed = UserInfo {
            username: "ed".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let foos = Attributes {
            group: "example.com",
            resource: "foos",
            ..pods("get", Some("default"))
        };
        assert!(
            allows(&store, &ed, &foos),
            "edit aggregates view, which aggregates foo-view"
        );
        assert!(allows(&store, &ed, &pods("delete", Some("default"))));
        assert!(!allows(&store, &ed, &pods("delete", Some("kube-system"))));
    }
}
