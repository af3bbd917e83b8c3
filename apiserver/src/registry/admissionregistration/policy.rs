//! Validating and mutating admission policies and their bindings: their defaults,
//! kube-apiserver's validation of them (`pkg/apis/admissionregistration/validation`: what must
//! be there, the values it takes, expressions that compile) and their printed rows. The
//! admission chain carries them out (`crate::admission`, its `policy` module).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::error::Cause;
use krec_core::json::{Pointer, strings};

/// The strategy of a ValidatingAdmissionPolicy (`false`) or MutatingAdmissionPolicy (`true`).
pub struct PolicyStrategy(bool);

/// The ValidatingAdmissionPolicy strategy.
pub static POLICY: PolicyStrategy = PolicyStrategy(false);

/// The MutatingAdmissionPolicy strategy.
pub static MUTATING_POLICY: PolicyStrategy = PolicyStrategy(true);

/// The strategy of a ValidatingAdmissionPolicyBinding (`false`) or MutatingAdmissionPolicyBinding
/// (`true`).
pub struct BindingStrategy(bool);

/// The ValidatingAdmissionPolicyBinding strategy.
pub static BINDING: BindingStrategy = BindingStrategy(false);

/// The MutatingAdmissionPolicyBinding strategy.
pub static MUTATING_BINDING: BindingStrategy = BindingStrategy(true);

/// `matchConstraints`' (and a binding's `matchResources`') defaults.
fn default_match_resources(resources: &mut Value) {
    if !resources.is_object() {
        return;
    }
    for (key, value) in [
        ("matchPolicy", json!("Equivalent")),
        ("namespaceSelector", json!({})),
        ("objectSelector", json!({})),
    ] {
        if resources.get(key).is_none_or(Value::is_null) {
            resources[key] = value;
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = resources.get_mut(key).and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter(|r| r.is_object()) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule["scope"] = json!("*");
                }
            }
        }
    }
}

fn unsupported(value: &str, supported: &[&str]) -> String {
    let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "Unsupported value: {value:?}: supported values: {}",
        quoted.join(", ")
    )
}

/// Whether `expression` compiles for a policy (the server's check; the store alone takes it).
fn compile_problem(expression: &str) -> Option<String> {
    #[cfg(feature = "server")]
    {
        match crate::expressions::compile(expression) {
            Err(errors) => Some(errors),
            Ok(expr) => crate::expressions::undeclared(&expr, crate::expressions::POLICY_VARIABLES),
        }
    }
    #[cfg(not(feature = "server"))]
    {
        let _ = expression;
        None
    }
}

impl Strategy for PolicyStrategy {
    fn default(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec").filter(|s| s.is_object()) else {
            return;
        };
        if spec.get("failurePolicy").is_none_or(Value::is_null) {
            spec["failurePolicy"] = json!("Fail");
        }
        if self.0 && spec.get("reinvocationPolicy").is_none_or(Value::is_null) {
            spec["reinvocationPolicy"] = json!("Never");
        }
        if let Some(constraints) = spec.get_mut("matchConstraints") {
            default_match_resources(constraints);
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes: Vec<Cause> = Vec::new();
        let spec = object.get("spec").cloned().unwrap_or_default();
        if let Some(policy) = spec.get("failurePolicy").and_then(Value::as_str)
            && !matches!(policy, "Fail" | "Ignore")
        {
            causes.push((
                "spec.failurePolicy".into(),
                unsupported(policy, &["Fail", "Ignore"]),
            ));
        }
        match spec.get("matchConstraints").filter(|m| m.is_object()) {
            None => causes.push(("spec.matchConstraints".into(), "Required value".into())),
            Some(constraints) => {
                if constraints
                    .get("resourceRules")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
                {
                    causes.push((
                        "spec.matchConstraints.resourceRules".into(),
                        "Required value".into(),
                    ));
                }
            }
        }
        if let Some(kind) = spec.get("paramKind").filter(|p| p.is_object()) {
            for key in ["apiVersion", "kind"] {
                if kind
                    .get(key)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push((format!("spec.paramKind.{key}"), "Required value".into()));
                }
            }
        }
        let validations = spec.get("validations").and_then(Value::as_array);
        let audits = spec.get("auditAnnotations").and_then(Value::as_array);
        if self.0 {
            mutations_problems(&spec, &mut causes);
        } else if validations.is_none_or(Vec::is_empty) && audits.is_none_or(Vec::is_empty) {
            causes.push((
                "spec.validations".into(),
                "Required value: validations or auditAnnotations must contain at least one item"
                    .into(),
            ));
        }
        let expression = |field: String, text: Option<&str>, causes: &mut Vec<Cause>| match text {
            None | Some("") => {
                causes.push((field, "Required value: expression is not specified".into()))
            }
            Some(text) => {
                if let Some(problem) = compile_problem(text) {
                    causes.push((
                        field,
                        format!("Invalid value: {text:?}: compilation failed: {problem}"),
                    ));
                }
            }
        };
        for (i, validation) in validations.into_iter().flatten().enumerate() {
            let at = format!("spec.validations[{i}]");
            expression(
                format!("{at}.expression"),
                validation.get("expression").and_then(Value::as_str),
                &mut causes,
            );
            if let Some(message) = validation.get("messageExpression").and_then(Value::as_str) {
                expression(
                    format!("{at}.messageExpression"),
                    Some(message),
                    &mut causes,
                );
            }
            if let Some(message) = validation.get("message").and_then(Value::as_str)
                && message.contains('\n')
            {
                causes.push((
                    format!("{at}.message"),
                    format!("Invalid value: {message:?}: message must not contain line breaks"),
                ));
            }
            if let Some(reason) = validation.get("reason").and_then(Value::as_str)
                && !matches!(
                    reason,
                    "Unauthorized" | "Forbidden" | "Invalid" | "RequestEntityTooLarge"
                )
            {
                causes.push((
                    format!("{at}.reason"),
                    unsupported(
                        reason,
                        &[
                            "Unauthorized",
                            "Forbidden",
                            "Invalid",
                            "RequestEntityTooLarge",
                        ],
                    ),
                ));
            }
        }
        for (key, list) in [
            ("matchConditions", "expression"),
            ("variables", "expression"),
            ("auditAnnotations", "valueExpression"),
        ] {
            for (i, item) in spec
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                expression(
                    format!("spec.{key}[{i}].{list}"),
                    item.get(list).and_then(Value::as_str),
                    &mut causes,
                );
            }
        }
        causes
    }

    fn columns(&self) -> &'static [Column] {
        const VALIDATING: &[Column] = &[
            NAME,
            Column::int("Validations"),
            Column::text("ParamKind"),
            AGE,
        ];
        const MUTATING: &[Column] = &[
            NAME,
            Column::int("Mutations"),
            Column::text("ParamKind"),
            AGE,
        ];
        if self.0 { MUTATING } else { VALIDATING }
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let validations = row
            .object
            .at(if self.0 {
                "/spec/mutations"
            } else {
                "/spec/validations"
            })
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let param_kind = match row.object.at("/spec/paramKind").filter(|p| p.is_object()) {
            Some(kind) => format!(
                "{}/{}",
                row.str("/spec/paramKind/apiVersion"),
                kind["kind"].as_str().unwrap_or_default()
            ),
            None => "<unset>".to_owned(),
        };
        vec![row.name(), json!(validations), json!(param_kind), row.age()]
    }
}

impl Strategy for BindingStrategy {
    fn default(&self, object: &mut Value) {
        if let Some(resources) = object.pointer_mut("/spec/matchResources") {
            default_match_resources(resources);
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes: Vec<Cause> = Vec::new();
        let spec = object.get("spec").cloned().unwrap_or_default();
        if spec
            .get("policyName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(("spec.policyName".into(), "Required value".into()));
        }
        let actions = strings(spec.get("validationActions"));
        if self.0 {
            // A mutating binding has no actions.
        } else if actions.is_empty() {
            causes.push((
                "spec.validationActions".into(),
                "Required value: at least one validation action is required".into(),
            ));
        }
        let mut seen = HashSet::new();
        for (i, action) in actions.iter().enumerate() {
            if !seen.insert(action.as_str()) {
                causes.push((
                    format!("spec.validationActions[{i}]"),
                    format!("Duplicate value: {action:?}"),
                ));
            } else if !matches!(action.as_str(), "Audit" | "Deny" | "Warn") {
                causes.push((
                    format!("spec.validationActions[{i}]"),
                    unsupported(action, &["Audit", "Deny", "Warn"]),
                ));
            }
        }
        if seen.contains("Deny") && seen.contains("Warn") {
            causes.push((
                "spec.validationActions".into(),
                "Forbidden: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)".into(),
            ));
        }
        if let Some(reference) = spec.get("paramRef").filter(|r| r.is_object()) {
            let named = reference
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let selected = reference.get("selector").is_some_and(|s| !s.is_null());
            if named && selected {
                causes.push((
                    "spec.paramRef.name".into(),
                    "Forbidden: name and selector are mutually exclusive".into(),
                ));
            } else if !named && !selected {
                causes.push((
                    "spec.paramRef".into(),
                    "Required value: one of name or selector must be specified".into(),
                ));
            }
            match reference
                .get("parameterNotFoundAction")
                .and_then(Value::as_str)
            {
                None => causes.push((
                    "spec.paramRef.parameterNotFoundAction".into(),
                    "Required value".into(),
                )),
                Some("Allow" | "Deny") => {}
                Some(other) => causes.push((
                    "spec.paramRef.parameterNotFoundAction".into(),
                    unsupported(other, &["Allow", "Deny"]),
                )),
            }
        }
        causes
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("PolicyName"),
            Column::text("ParamRef"),
            AGE,
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let param_ref = match row.object.at("/spec/paramRef").filter(|p| p.is_object()) {
            Some(reference) => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("*");
                match reference.get("namespace").and_then(Value::as_str) {
                    Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
                    _ => name.to_owned(),
                }
            }
            None => "<unset>".to_owned(),
        };
        vec![
            row.name(),
            json!(row.str("/spec/policyName")),
            json!(param_ref),
            row.age(),
        ]
    }
}

/// A MutatingAdmissionPolicy's `mutations`: at least one, each a known `patchType` with its
/// expression.
fn mutations_problems(spec: &Value, causes: &mut Vec<Cause>) {
    let mutations = spec.get("mutations").and_then(Value::as_array);
    if mutations.is_none_or(Vec::is_empty) {
        causes.push((
            "spec.mutations".into(),
            "Required value: mutations must contain at least one item".into(),
        ));
    }
    if let Some(policy) = spec.get("reinvocationPolicy").and_then(Value::as_str)
        && !matches!(policy, "Never" | "IfNeeded")
    {
        causes.push((
            "spec.reinvocationPolicy".into(),
            unsupported(policy, &["IfNeeded", "Never"]),
        ));
    }
    for (i, mutation) in mutations.into_iter().flatten().enumerate() {
        let at = format!("spec.mutations[{i}]");
        let (key, field) = match mutation.get("patchType").and_then(Value::as_str) {
            Some("ApplyConfiguration") => ("applyConfiguration", "applyConfiguration.expression"),
            Some("JSONPatch") => ("jsonPatch", "jsonPatch.expression"),
            Some(other) => {
                causes.push((
                    format!("{at}.patchType"),
                    unsupported(other, &["ApplyConfiguration", "JSONPatch"]),
                ));
                continue;
            }
            None => {
                causes.push((format!("{at}.patchType"), "Required value".into()));
                continue;
            }
        };
        match mutation
            .get(key)
            .and_then(|m| m.get("expression"))
            .and_then(Value::as_str)
        {
            None | Some("") => causes.push((
                format!("{at}.{field}"),
                "Required value: expression is not specified".into(),
            )),
            Some(text) => {
                if let Some(problem) = compile_problem(text) {
                    causes.push((
                        format!("{at}.{field}"),
                        format!("Invalid value: {text:?}: compilation failed: {problem}"),
                    ));
                }
            }
        }
    }
}
