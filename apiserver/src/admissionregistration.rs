//! The webhooks `admissionregistration.k8s.io/v1` configurations declare, read into [`Hook`]s
//! that match requests as kube-apiserver's `rules.Matcher` and `namespace`/`object` matchers do.
//! The configurations' own defaults and validation are their strategy's
//! (`registry/admissionregistration`).

use std::time::Duration;

use serde_json::Value;

use crate::webhook::ClientConfig;
use krec_core::json::{Pointer, strings};
use krec_core::selector::LabelSelector;

/// Whether a webhook may change the object or only judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// From a `MutatingWebhookConfiguration`: may answer a JSON patch.
    Mutating,
    /// From a `ValidatingWebhookConfiguration`: allows or denies.
    Validating,
}

/// What a request does, as `admission.Operation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (POST, or a server-side apply of a missing object).
    Create,
    /// An update (PUT or PATCH).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    /// The name in rules and reviews: `CREATE`, `UPDATE`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One rule of a webhook or admission policy: operations on resources of groups and versions,
/// in a scope.
#[derive(Clone, Debug)]
pub struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

/// One webhook of a configuration, ready to match requests.
#[derive(Clone, Debug)]
pub struct Hook {
    /// The webhook's name (`foo.example.com`), named in denials and errors.
    pub name: String,
    /// Mutating or validating.
    pub kind: HookKind,
    rules: Vec<Rule>,
    /// `failurePolicy: Fail` (the default): a webhook that cannot be called fails the request.
    pub fail_closed: bool,
    /// `matchPolicy: Equivalent` (the default): a rule naming another version of a resource
    /// matches it too.
    equivalent: bool,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    /// `sideEffects`: only `None` or `NoneOnDryRun` may be called for a dry-run request (a dry
    /// run meeting another is refused with 400).
    pub side_effects: String,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`: called once more when a later webhook changed the object.
    pub reinvoke: bool,
    /// Where it is reached and what signs its certificate.
    pub client: ClientConfig,
}

/// What a request is, for matching: the resource it acts on and the objects involved.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The operation.
    pub operation: Operation,
    /// API group of the resource.
    pub group: &'a str,
    /// Version of the resource in the request.
    pub version: &'a str,
    /// The resource's plural.
    pub resource: &'a str,
    /// The subresource, `""` for the main resource.
    pub subresource: &'a str,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// The new object (none for a delete).
    pub object: Option<&'a Value>,
    /// The stored object (none for a create).
    pub old_object: Option<&'a Value>,
}

fn contains_or_star(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    /// A rule as a configuration declares it (`RuleWithOperations`).
    pub fn from_json(rule: &Value) -> Self {
        Rule {
            operations: strings(rule.get("operations")),
            api_groups: strings(rule.get("apiGroups")),
            api_versions: strings(rule.get("apiVersions")),
            resources: strings(rule.get("resources")),
            scope: rule
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_owned(),
        }
    }

    /// As `rules.Matcher`: operation, group, version (unless `any_version`), resource with its
    /// subresource (`pods` and `*` match main resources only; `pods/status`, `*/status`; `pods/*`
    /// and `*/*` match the resource and all its subresources) and scope.
    pub fn matches(&self, request: &Request<'_>, any_version: bool) -> bool {
        let resource_matches = self.resources.iter().any(|pattern| {
            let (resource, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
            (resource == "*" || resource == request.resource)
                && (sub == "*" || sub == request.subresource)
        });
        let scope_matches = match self.scope.as_str() {
            "Cluster" => !request.namespaced,
            "Namespaced" => request.namespaced,
            _ => true,
        };
        contains_or_star(&self.operations, request.operation.as_str())
            && contains_or_star(&self.api_groups, request.group)
            && (any_version || contains_or_star(&self.api_versions, request.version))
            && resource_matches
            && scope_matches
    }
}

impl Hook {
    /// The webhooks of a stored configuration (defaulted and validated when it was written).
    pub fn from_configuration(kind: HookKind, configuration: &Value) -> Vec<Hook> {
        configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|webhook| Hook::from_webhook(kind, webhook))
            .collect()
    }

    fn from_webhook(kind: HookKind, webhook: &Value) -> Option<Hook> {
        let text = |pointer: &str| webhook.at(pointer).and_then(Value::as_str);
        let client = ClientConfig::from_json(webhook.get("clientConfig")?)?;
        let selector = |key: &str| {
            webhook
                .get(key)
                .map_or(Some(LabelSelector::default()), LabelSelector::from_json)
        };
        Some(Hook {
            name: text("/name")?.to_owned(),
            kind,
            rules: webhook
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(Rule::from_json)
                .collect(),
            fail_closed: text("/failurePolicy") != Some("Ignore"),
            equivalent: text("/matchPolicy") != Some("Exact"),
            namespace_selector: selector("namespaceSelector")?,
            object_selector: selector("objectSelector")?,
            side_effects: text("/sideEffects").unwrap_or("Unknown").to_owned(),
            timeout: Duration::from_secs(
                webhook["timeoutSeconds"]
                    .as_u64()
                    .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
                    .clamp(1, MAX_TIMEOUT_SECONDS),
            ),
            reinvoke: text("/reinvocationPolicy") == Some("IfNeeded"),
            client,
        })
    }

    /// Whether a rule matches the request (any version of the resource with `matchPolicy:
    /// Equivalent`: the embedded server serves one version of each built-in resource, and
    /// objects are sent as the request has them) and the object selector selects the new or
    /// the old object. The namespace selector is checked by the caller, which knows the
    /// namespace's labels.
    pub fn matches(&self, request: &Request<'_>) -> bool {
        let rule = self.rules.iter().any(|r| r.matches(request, false))
            || (self.equivalent && self.rules.iter().any(|r| r.matches(request, true)));
        rule && (self.object_selector.requirements.is_empty()
            || [request.object, request.old_object]
                .into_iter()
                .flatten()
                .any(|o| self.object_selector.matches_object(o)))
    }

    /// Whether the namespace selector selects a namespace with `labels` (always, for an
    /// empty selector).
    pub fn selects_namespace(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.namespace_selector.matches(labels)
    }

    /// Whether the namespace selector has requirements (so the namespace must be read).
    pub fn has_namespace_selector(&self) -> bool {
        !self.namespace_selector.requirements.is_empty()
    }
}

/// `timeoutSeconds` when unset.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 10;
/// The largest `timeoutSeconds` kube-apiserver accepts.
pub const MAX_TIMEOUT_SECONDS: u64 = 30;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::registry::Strategy;
    use crate::registry::admissionregistration::webhookconfiguration::MUTATING;

    fn pod_request<'a>(operation: Operation, pod: &'a Value) -> Request<'a> {
        Request {
            operation,
            group: "",
            version: "v1",
            resource: "pods",
            subresource: "",
            namespaced: true,
            object: Some(pod),
            old_object: None,
        }
    }

    fn hook(rules: Value, extra: Value) -> Hook {
        let mut webhook = json!({"name": "pods.example.com", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "rules": rules,
            "clientConfig": {"url": "https://127.0.0.1:9443/mutate"}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            webhook[k] = v.clone();
        }
        let mut config = json!({"metadata": {"name": "c"}, "webhooks": [webhook]});
        MUTATING.default(&mut config);
        assert!(MUTATING.validate(&config, None).is_empty());
        Hook::from_configuration(HookKind::Mutating, &config).remove(0)
    }

    #[test]
    fn rules_should_match_as_kube_apiservers_matcher() {
        let pod = json!({"metadata": {"labels": {"app": "web"}}});
        let all_pods = hook(
            json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]),
            json!({}),
        );
        assert!(all_pods.matches(&pod_request(Operation::Create, &pod)));
        assert!(!all_pods.matches(&pod_request(Operation::Update, &pod)));
        let mut status = pod_request(Operation::Create, &pod);
        status.subresource = "status";
        assert!(
            !all_pods.matches(&status),
            "`pods` does not match pods/status"
        );
        let any_sub = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]),
            json!({}),
        );
        assert!(any_sub.matches(&status));
        assert!(
            any_sub.matches(&pod_request(Operation::Create, &pod)),
            "`*/*` matches main resources too"
        );
        let only_main = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]),
            json!({}),
        );
        assert!(
            !only_main.matches(&status),
            "`*` matches main resources only"
        );
        let cluster_only = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"}]),
            json!({}),
        );
        assert!(!cluster_only.matches(&pod_request(Operation::Create, &pod)));
        let other_version = hook(
            json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v2"], "resources": ["pods"]}]),
            json!({}),
        );
        assert!(other_version.matches(&pod_request(Operation::Create, &pod)));
        let exact = hook(
            json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v2"], "resources": ["pods"]}]),
            json!({"matchPolicy": "Exact"}),
        );
        assert!(!exact.matches(&pod_request(Operation::Create, &pod)));
        let selected = hook(
            json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]),
            json!({"objectSelector": {"matchLabels": {"app": "db"}}}),
        );
        assert!(!selected.matches(&pod_request(Operation::Create, &pod)));
    }
}
