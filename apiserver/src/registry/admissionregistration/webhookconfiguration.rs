//! Validating and mutating webhook configurations: `SetDefaults_*Webhook`, kube-apiserver's
//! validation of them, and `printValidatingWebhookConfiguration`'s row. The admission chain
//! reads the webhooks they declare (`crate::admissionregistration`).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::admissionregistration::{DEFAULT_TIMEOUT_SECONDS, HookKind, MAX_TIMEOUT_SECONDS};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use crate::webhook::{validate_client_config, validate_review_versions};
use krec_core::error::Cause;
use krec_core::json::strings;
use krec_core::selector::LabelSelector;

/// The strategy of one of the two webhook configuration kinds.
pub struct WebhookConfigurationStrategy(HookKind);

/// The ValidatingWebhookConfiguration strategy.
pub static VALIDATING: WebhookConfigurationStrategy =
    WebhookConfigurationStrategy(HookKind::Validating);

/// The MutatingWebhookConfiguration strategy.
pub static MUTATING: WebhookConfigurationStrategy =
    WebhookConfigurationStrategy(HookKind::Mutating);

impl Strategy for WebhookConfigurationStrategy {
    fn default(&self, object: &mut Value) {
        apply_defaults(self.0, object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        validate(self.0, object)
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::int("Webhooks"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let webhooks = row
            .object
            .get("webhooks")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        vec![row.name(), json!(webhooks), row.age()]
    }
}

/// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook` and their rules' and
/// service references' defaults.
fn apply_defaults(kind: HookKind, configuration: &mut Value) {
    let Some(webhooks) = configuration
        .get_mut("webhooks")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for webhook in webhooks.iter_mut().filter(|w| w.is_object()) {
        let mut set = |key: &str, value: Value| {
            if webhook.get(key).is_none_or(Value::is_null) {
                webhook[key] = value;
            }
        };
        set("failurePolicy", json!("Fail"));
        set("matchPolicy", json!("Equivalent"));
        set("namespaceSelector", json!({}));
        set("objectSelector", json!({}));
        set("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
        if kind == HookKind::Mutating {
            set("reinvocationPolicy", json!("Never"));
        }
        if let Some(rules) = webhook.get_mut("rules").and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter(|r| r.is_object()) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule["scope"] = json!("*");
                }
            }
        }
        if let Some(service) = webhook
            .pointer_mut("/clientConfig/service")
            .filter(|s| s.is_object())
            && service.get("port").is_none_or(Value::is_null)
        {
            service["port"] = json!(443);
        }
    }
}

/// kube-apiserver's `ValidateValidatingWebhookConfiguration` / `…Mutating…` for `v1`: the
/// causes of a 422, with its field paths and messages.
fn validate(kind: HookKind, configuration: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(webhooks) = configuration.get("webhooks") else {
        return causes;
    };
    let Some(webhooks) = webhooks.as_array() else {
        causes.push((
            "webhooks".into(),
            "Invalid value: must be a list of webhooks".into(),
        ));
        return causes;
    };
    let mut names = HashSet::new();
    for (i, webhook) in webhooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let text = |key: &str| webhook.get(key).and_then(Value::as_str);
        match text("name") {
            None | Some("") => causes.push((format!("{path}.name"), "Required value".into())),
            Some(name) => {
                if !names.insert(name.to_owned()) {
                    causes.push((format!("{path}.name"), format!("Duplicate value: {name:?}")));
                }
                if !is_fully_qualified_name(name) {
                    causes.push((
                        format!("{path}.name"),
                        format!(
                            "Invalid value: {name:?}: should be a domain with at least three segments separated by dots"
                        ),
                    ));
                }
            }
        }
        match text("sideEffects") {
            Some("None" | "NoneOnDryRun") => {}
            Some(other) => causes.push((
                format!("{path}.sideEffects"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"None\", \"NoneOnDryRun\""
                ),
            )),
            None => causes.push((
                format!("{path}.sideEffects"),
                "Required value: must specify one of None, NoneOnDryRun".into(),
            )),
        }
        validate_review_versions(
            webhook.get("admissionReviewVersions"),
            &format!("{path}.admissionReviewVersions"),
            "admission.k8s.io",
            &mut causes,
        );
        for (key, values) in [
            ("failurePolicy", &["Fail", "Ignore"][..]),
            ("matchPolicy", &["Exact", "Equivalent"][..]),
        ] {
            if let Some(value) = text(key)
                && !values.contains(&value)
            {
                causes.push((
                    format!("{path}.{key}"),
                    format!("Unsupported value: {value:?}: supported values: {values:?}"),
                ));
            }
        }
        if kind == HookKind::Mutating
            && let Some(value) = text("reinvocationPolicy")
            && !["Never", "IfNeeded"].contains(&value)
        {
            causes.push((
                format!("{path}.reinvocationPolicy"),
                format!("Unsupported value: {value:?}: supported values: \"IfNeeded\", \"Never\""),
            ));
        }
        if let Some(timeout) = webhook.get("timeoutSeconds").and_then(Value::as_i64)
            && !(1..=MAX_TIMEOUT_SECONDS as i64).contains(&timeout)
        {
            causes.push((
                format!("{path}.timeoutSeconds"),
                format!(
                    "Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
                ),
            ));
        }
        for key in ["namespaceSelector", "objectSelector"] {
            if let Some(selector) = webhook.get(key)
                && LabelSelector::from_json(selector).is_none()
            {
                causes.push((
                    format!("{path}.{key}"),
                    format!("Invalid value: {selector}: not a valid label selector"),
                ));
            }
        }
        validate_client_config(webhook.get("clientConfig"), &path, &mut causes);
        rules(webhook.get("rules"), &path, &mut causes);
    }
    causes
}

fn rules(rules: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    const OPERATIONS: &[&str] = &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];
    for (j, rule) in rules
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{path}.rules[{j}]");
        for key in ["operations", "apiGroups", "apiVersions", "resources"] {
            let values = strings(rule.get(key));
            if values.is_empty() {
                causes.push((format!("{path}.{key}"), "Required value".into()));
            }
            if values.len() > 1 && values.iter().any(|v| v == "*") {
                causes.push((
                    format!("{path}.{key}"),
                    format!(
                        "Invalid value: {values:?}: if '*' is present, must not specify other {key}"
                    ),
                ));
            }
            if key == "operations" {
                for op in values
                    .iter()
                    .filter(|op| !OPERATIONS.contains(&op.as_str()))
                {
                    causes.push((
                        format!("{path}.operations"),
                        format!(
                            "Unsupported value: {op:?}: supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\""
                        ),
                    ));
                }
            }
        }
        if let Some(scope) = rule.get("scope").and_then(Value::as_str)
            && !["*", "Cluster", "Namespaced"].contains(&scope)
        {
            causes.push((
                format!("{path}.scope"),
                format!(
                    "Unsupported value: {scope:?}: supported values: \"*\", \"Cluster\", \"Namespaced\""
                ),
            ));
        }
    }
}

/// `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
fn is_fully_qualified_name(name: &str) -> bool {
    krec_core::selector::is_dns_subdomain(name) && name.split('.').count() >= 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_should_get_kube_apiservers_defaults_and_validation() {
        let mut config = json!({"metadata": {"name": "c"}, "webhooks": [
            {"name": "short", "clientConfig": {"url": "http://x/y"}, "rules": [{"operations": ["GET"]}],
             "timeoutSeconds": 60}]});
        apply_defaults(HookKind::Validating, &mut config);
        assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail");
        assert_eq!(config["webhooks"][0]["matchPolicy"], "Equivalent");
        assert_eq!(config["webhooks"][0]["rules"][0]["scope"], "*");
        let causes: Vec<String> = validate(HookKind::Validating, &config)
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        for field in [
            "webhooks[0].name",
            "webhooks[0].sideEffects",
            "webhooks[0].admissionReviewVersions",
            "webhooks[0].timeoutSeconds",
            "webhooks[0].clientConfig.url",
            "webhooks[0].rules[0].operations",
            "webhooks[0].rules[0].resources",
        ] {
            assert!(causes.iter().any(|c| c == field), "{field} in {causes:?}");
        }
    }
}
