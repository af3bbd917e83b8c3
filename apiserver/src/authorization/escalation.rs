//! RBAC's privilege-escalation prevention, as kube-apiserver's `rbac/*/policybased` storage
//! does it: a user may write a Role or ClusterRole only with rules it holds itself (or the
//! `escalate` verb on it), and bind a role only if it holds the role's rules (or the `bind`
//! verb on it). Otherwise RBAC would be no limit: whoever may create RoleBindings could grant
//! itself `cluster-admin`.

use serde_json::Value;

use super::{Attributes, RBAC, allows, role_rules, rules_for, unrestricted};
use crate::authentication::UserInfo;
use crate::resources::ResourceType;
use crate::store::Store;
use krec_core::ApiError;
use krec_core::json::Pointer as _;

/// The API group whose writes are checked.
pub const GROUP: &str = RBAC;

/// Whether `user` may write `new` (replacing `old`), an RBAC role or binding, without gaining
/// permissions it does not hold: `Ok`, or kube's 403 naming what it lacks. Other kinds pass.
///
/// # Errors
///
/// kube's 403 (`user "…" (groups=[…]) is attempting to grant RBAC permissions not currently
/// held: …`), or the 404 of a binding's missing role.
pub fn check(
    store: &Store,
    user: &UserInfo,
    rt: &ResourceType,
    namespace: Option<&str>,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if rt.group != RBAC || unrestricted(user) || old.is_some_and(|old| only_gc_fields(old, new)) {
        return Ok(());
    }
    let namespace = namespace
        .or_else(|| new.at("/metadata/namespace").and_then(Value::as_str))
        .filter(|_| rt.namespaced);
    let name = new
        .at("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A create names no object yet, as kube's request attributes have it: an `escalate` limited
    // to some names does not let one create them.
    let creating = old.is_none();
    let may = |verb, resource, name: &str| {
        allows(
            store,
            user,
            &Attributes {
                verb,
                group: RBAC,
                resource,
                subresource: "",
                namespace,
                name: Some(name).filter(|n| !n.is_empty()),
                path: None,
            },
        )
    };
    let forbidden = |message: String| {
        let mut error = ApiError::forbidden(format!(
            "{}.{RBAC} {name:?} is forbidden: {message}",
            rt.plural
        ));
        error.details = Some(serde_json::json!({"name": name, "group": RBAC, "kind": rt.plural}));
        error
    };
    let rules = match rt.kind.as_str() {
        "Role" | "ClusterRole" => {
            if may("escalate", &rt.plural, if creating { "" } else { name }) {
                return Ok(());
            }
            if new
                .get("aggregationRule")
                .is_some_and(|rule| !rule.is_null())
            {
                return Err(forbidden(
                    "must have cluster-admin privileges to use the aggregationRule".into(),
                ));
            }
            new.get("rules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let text = |pointer| new.at(pointer).and_then(Value::as_str).unwrap_or_default();
            let (kind, role) = (text("/roleRef/kind"), text("/roleRef/name"));
            let resource = if kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if may("bind", resource, role) {
                return Ok(());
            }
            role_rules(store, kind, role, namespace)
                .ok_or_else(|| ApiError::not_found(RBAC, resource, role))?
        }
        _ => return Ok(()),
    };
    let held = rules_for(store, user, namespace);
    let missing = uncovered(&held, &rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut described: Vec<String> = compact(missing).iter().map(compact_string).collect();
    described.sort();
    described.dedup();
    Err(forbidden(format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.username,
        go_quoted(&user.groups),
        described.join("\n")
    )))
}

/// Whether `new` differs from `old` only in what garbage collection writes (owner references,
/// finalizers) or the server keeps (resourceVersion, managed fields): kube lets such writes
/// through unchecked so that objects can always be deleted.
fn only_gc_fields(old: &Value, new: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                meta.remove(key);
            }
        }
        object
    };
    strip(old) == strip(new)
}

/// A rule as lists of strings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `resourceNames`.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    pub non_resource_urls: Vec<String>,
    /// `verbs`.
    pub verbs: Vec<String>,
}

impl Rule {
    /// A PolicyRule's lists (missing ones empty).
    pub fn of(rule: &Value) -> Self {
        let list = |key: &str| -> Vec<String> {
            rule.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        Rule {
            api_groups: list("apiGroups"),
            resources: list("resources"),
            resource_names: list("resourceNames"),
            non_resource_urls: list("nonResourceURLs"),
            verbs: list("verbs"),
        }
    }
}

/// The rules of `wanted`, broken down to one verb on one resource (and name) or one URL each,
/// that no rule of `held` covers — kube's `Covers`.
fn uncovered(held: &[Value], wanted: &[Value]) -> Vec<Rule> {
    let held: Vec<Rule> = held.iter().map(Rule::of).collect();
    wanted
        .iter()
        .flat_map(|rule| breakdown(&Rule::of(rule)))
        .filter(|single| !held.iter().any(|owner| covers(owner, single)))
        .collect()
}

/// One rule per group × resource × verb (× name), and per URL × verb — kube's
/// `BreakdownRule`.
fn breakdown(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut singles = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let single = Rule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    singles.push(single);
                } else {
                    singles.extend(rule.resource_names.iter().map(|name| Rule {
                        resource_names: one(name),
                        ..single.clone()
                    }));
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            singles.push(Rule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..Rule::default()
            });
        }
    }
    singles
}

/// Whether `owner` allows everything `servant` does — kube's `ruleCovers`.
fn covers(owner: &Rule, servant: &Rule) -> bool {
    let has = |set: &[String], item: &str| set.iter().any(|s| s == item);
    let has_all = |set: &[String], items: &[String]| items.iter().all(|i| has(set, i));
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &servant.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &servant.api_groups);
    let resources = has(&owner.resources, "*")
        || servant.resources.iter().all(|resource| {
            has(&owner.resources, resource)
                || resource
                    .split_once('/')
                    .is_some_and(|(_, sub)| has(&owner.resources, &format!("*/{sub}")))
        });
    let urls = servant.non_resource_urls.iter().all(|url| {
        owner.non_resource_urls.iter().any(|own| {
            own == url
                || own
                    .strip_suffix('*')
                    .is_some_and(|prefix| url.starts_with(prefix))
        })
    });
    let names = owner.resource_names.is_empty()
        || (!servant.resource_names.is_empty()
            && has_all(&owner.resource_names, &servant.resource_names));
    verbs && groups && resources && urls && names
}

/// Rules on one group, one resource and at most one name merged into one with all their verbs —
/// kube's `CompactRules`, so a refusal lists `Verbs:["get" "list"]` once.
fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut compacted: Vec<Rule> = Vec::new();
    let mut simple: Vec<Rule> = Vec::new();
    for rule in rules {
        let is_simple = rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.resource_names.len() <= 1;
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups
                && s.resources == rule.resources
                && s.resource_names == rule.resource_names
        }) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    compacted.extend(simple);
    compacted
}

/// A rule as kube's `PolicyRule.CompactString` prints it:
/// `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`.
fn compact_string(rule: &Rule) -> String {
    let parts: Vec<String> = [
        ("APIGroups", &rule.api_groups),
        ("Resources", &rule.resources),
        ("NonResourceURLs", &rule.non_resource_urls),
        ("ResourceNames", &rule.resource_names),
        ("Verbs", &rule.verbs),
    ]
    .into_iter()
    .filter(|(_, list)| !list.is_empty())
    .map(|(label, list)| format!("{label}:{}", go_quoted(list)))
    .collect();
    format!("{{{}}}", parts.join(", "))
}

/// A list of strings as Go's `%q` prints a `[]string`: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(value: Value) -> Rule {
        Rule::of(&value)
    }

    #[test]
    fn a_rule_should_be_covered_as_kube_covers_it() {
        let owner = rule(json!({"apiGroups": [""], "resources": ["pods", "*/status"],
            "verbs": ["get", "list"]}));
        let single = |group: &str, resource: &str, verb: &str| Rule {
            api_groups: vec![group.into()],
            resources: vec![resource.into()],
            verbs: vec![verb.into()],
            ..Rule::default()
        };
        assert!(covers(&owner, &single("", "pods", "get")));
        assert!(covers(&owner, &single("", "services/status", "list")));
        assert!(!covers(&owner, &single("", "pods", "delete")));
        assert!(!covers(&owner, &single("apps", "pods", "get")));
        assert!(!covers(&owner, &single("", "*", "get")));
        let named = rule(json!({"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["a"], "verbs": ["*"]}));
        assert!(!covers(&named, &single("", "configmaps", "get")));
        assert!(covers(
            &named,
            &Rule {
                resource_names: vec!["a".into()],
                ..single("", "configmaps", "get")
            }
        ));
        let urls = rule(json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}));
        let url = |path: &str| Rule {
            non_resource_urls: vec![path.into()],
            verbs: vec!["get".into()],
            ..Rule::default()
        };
        assert!(covers(&urls, &url("/apis/apps")));
        assert!(!covers(&urls, &url("/api")));
    }

    #[test]
    fn what_is_missing_should_be_listed_as_kube_lists_it() {
        let held = [json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})];
        let wanted = [
            json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list", "watch"]}),
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
        ];
        let mut described: Vec<String> = compact(uncovered(&held, &wanted))
            .iter()
            .map(compact_string)
            .collect();
        described.sort();
        assert_eq!(
            described,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "watch"]}"#,
                r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#,
            ]
        );
    }
}
