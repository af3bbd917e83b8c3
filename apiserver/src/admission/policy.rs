//! ValidatingAdmissionPolicy, as kube-apiserver's `ValidatingAdmissionPolicy` admission plugin
//! runs it (`apiserver/pkg/admission/plugin/policy/validating`), after the mutating webhooks and
//! before the validating ones: each ValidatingAdmissionPolicyBinding (in name order) puts its
//! policy to the requests both match (`matchConstraints`, the binding's `matchResources`,
//! then the policy's `matchConditions`), once per parameter object its `paramRef` selects;
//! each `validation` that is false is a decision carried out as the binding's
//! `validationActions` say — `Deny` refuses the request with kube's message and status,
//! `Warn` answers a warning, `Audit` records it in the audit event's annotations — and an
//! expression that fails, or a binding that cannot be configured, follows `failurePolicy`.
//!
//! Expressions see `object`, `oldObject`, `request` (the admission request without its
//! objects), `params`, `namespaceObject` and `variables`; compiled once per policy
//! `resourceVersion`. Not yet: `authorizer`, the type checking written into
//! `status.typeChecking` (docs/apiserver.md, differences). Expressions are metered with kube's
//! runtime cost limits ([`expressions::cost`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cel::common::ast::IdedExpr;
use serde_json::{Value, json};

use super::{Attributes, match_request, review};
use crate::admissionregistration::{Request, Rule};
use crate::expressions;
use crate::resources::ResourceType;
use crate::store::Store;
use krec_core::error::ApiError;
use krec_core::json::{Pointer, strings};
use krec_core::selector::{LabelSelector, object_labels};

const GROUP: &str = "admissionregistration.k8s.io";

/// The key of the audit annotation listing the `Audit` decisions.
pub const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";

/// An expression of a policy, compiled (or why it does not compile).
struct Expression {
    text: String,
    compiled: Result<IdedExpr, String>,
}

impl Expression {
    fn new(text: &str) -> Self {
        let compiled = expressions::compile(text).and_then(|expr| {
            match expressions::undeclared(&expr, expressions::POLICY_VARIABLES) {
                Some(error) => Err(error),
                // Charged as it runs (kube's runtime cost limits).
                None => Ok(expressions::cost::metered(&expr)),
            }
        });
        Expression {
            text: text.trim().to_owned(),
            compiled,
        }
    }

    fn evaluate(&self, variables: &[(&str, cel::Value)]) -> Result<cel::Value, String> {
        let expr = self
            .compiled
            .as_ref()
            .map_err(|error| format!("compilation error: {error}"))?;
        expressions::evaluate(expr, variables)
    }
}

/// A validation of a policy.
struct Validation {
    expression: Expression,
    message: String,
    message_expression: Option<Expression>,
    reason: String,
}

/// What requests a policy or binding applies to (`matchConstraints`, `matchResources`).
struct Matcher {
    rules: Vec<(Rule, Vec<String>)>,
    exclude: Vec<(Rule, Vec<String>)>,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    equivalent: bool,
}

impl Matcher {
    fn from_json(resources: &Value) -> Self {
        let rules = |key: &str| -> Vec<(Rule, Vec<String>)> {
            resources
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|rule| (Rule::from_json(rule), strings(rule.get("resourceNames"))))
                .collect()
        };
        let selector = |key: &str| {
            resources
                .get(key)
                .and_then(LabelSelector::from_json)
                .unwrap_or_default()
        };
        Matcher {
            rules: rules("resourceRules"),
            exclude: rules("excludeResourceRules"),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            equivalent: resources.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
        }
    }

    fn matches(
        &self,
        request: &Request<'_>,
        name: &str,
        namespace: &BTreeMap<String, String>,
    ) -> bool {
        let rule_matches = |(rule, names): &(Rule, Vec<String>)| {
            (rule.matches(request, false) || (self.equivalent && rule.matches(request, true)))
                && (names.is_empty() || names.iter().any(|n| n == name))
        };
        // A binding's `matchResources` without rules narrows what its policy matches only by
        // its selectors; a request with no namespace (not on a Namespace) has none to select.
        let scoped =
            request.namespaced || (request.group.is_empty() && request.resource == "namespaces");
        (self.rules.is_empty() || self.rules.iter().any(rule_matches))
            && !self.exclude.iter().any(rule_matches)
            && (!scoped || self.namespace_selector.matches(namespace))
            && (self.object_selector.requirements.is_empty()
                || [request.object, request.old_object]
                    .into_iter()
                    .flatten()
                    .any(|o| self.object_selector.matches_object(o)))
    }
}

/// A ValidatingAdmissionPolicy, compiled.
struct Policy {
    name: String,
    fail_closed: bool,
    constraints: Matcher,
    /// `paramKind`: apiVersion and kind.
    param_kind: Option<(String, String)>,
    conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expression)>,
    /// A mutating policy's `mutations`.
    mutations: Vec<Mutation>,
}

/// One mutation of a MutatingAdmissionPolicy.
struct Mutation {
    /// `ApplyConfiguration` (else `JSONPatch`).
    apply: bool,
    expression: Expression,
}

impl Policy {
    fn compile(policy: &Value) -> Self {
        let spec = policy.get("spec").cloned().unwrap_or_default();
        let list = |key: &str| -> Vec<Value> {
            spec.get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let text = |value: &Value, key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Policy {
            name: text(policy.get("metadata").unwrap_or(&Value::Null), "name"),
            fail_closed: spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
            constraints: Matcher::from_json(spec.get("matchConstraints").unwrap_or(&Value::Null)),
            param_kind: spec
                .get("paramKind")
                .filter(|p| p.is_object())
                .map(|p| (text(p, "apiVersion"), text(p, "kind"))),
            conditions: list("matchConditions")
                .iter()
                .map(|c| (text(c, "name"), Expression::new(&text(c, "expression"))))
                .collect(),
            variables: list("variables")
                .iter()
                .map(|v| (text(v, "name"), Expression::new(&text(v, "expression"))))
                .collect(),
            validations: list("validations")
                .iter()
                .map(|v| Validation {
                    expression: Expression::new(&text(v, "expression")),
                    message: text(v, "message").trim().to_owned(),
                    message_expression: v
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .map(Expression::new),
                    reason: text(v, "reason"),
                })
                .collect(),
            audit_annotations: list("auditAnnotations")
                .iter()
                .map(|a| (text(a, "key"), Expression::new(&text(a, "valueExpression"))))
                .collect(),
            mutations: list("mutations")
                .iter()
                .map(|m| {
                    let apply = text(m, "patchType") == "ApplyConfiguration";
                    let source = if apply {
                        m.at("/applyConfiguration/expression")
                    } else {
                        m.at("/jsonPatch/expression")
                    };
                    Mutation {
                        apply,
                        expression: Expression::new(
                            source.and_then(Value::as_str).unwrap_or_default(),
                        ),
                    }
                })
                .collect(),
        }
    }
}

/// The policies of one server (validating and mutating), compiled once per `resourceVersion`.
pub struct Policies {
    policies: Option<ResourceType>,
    bindings: Option<ResourceType>,
    mutating: Option<ResourceType>,
    mutating_bindings: Option<ResourceType>,
    compiled: Mutex<HashMap<String, (String, Arc<Policy>)>>,
}

/// A policy a binding puts to a request: the policy, the binding, the parameters (or why they
/// cannot be had).
struct Invocation {
    policy: Arc<Policy>,
    binding: String,
    params: Result<Vec<Value>, String>,
}

/// What the policies made of a request they let through.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `Warn` decisions, as the response's warnings.
    pub warnings: Vec<String>,
    /// Audit annotations: `Audit` decisions and the policies' `auditAnnotations`.
    pub annotations: Vec<(String, String)>,
}

/// One decision to carry out.
struct Decision {
    policy: String,
    binding: String,
    message: String,
    reason: String,
    index: usize,
    actions: Vec<String>,
}

impl Policies {
    /// The policies `store` holds.
    pub fn new(store: &Store) -> Self {
        let registry = store.registry();
        Policies {
            policies: registry.by_kind(GROUP, "v1", "ValidatingAdmissionPolicy"),
            bindings: registry.by_kind(GROUP, "v1", "ValidatingAdmissionPolicyBinding"),
            mutating: registry.by_kind(GROUP, "v1", "MutatingAdmissionPolicy"),
            mutating_bindings: registry.by_kind(GROUP, "v1", "MutatingAdmissionPolicyBinding"),
            compiled: Mutex::default(),
        }
    }

    /// Whether any binding exists (else no policy applies to anything).
    pub fn configured(&self, store: &Store) -> bool {
        [&self.bindings, &self.mutating_bindings]
            .into_iter()
            .flatten()
            .any(|rt| store.has_any(rt))
    }

    /// The policies of `policies` that bindings of `bindings` put to the request, in binding
    /// name order.
    fn invocations(
        &self,
        store: &Store,
        (policies, bindings): (&ResourceType, &ResourceType),
        attributes: &Attributes<'_>,
        request: &Request<'_>,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Vec<(Invocation, Arc<Value>)> {
        let mut invocations = Vec::new();
        for binding in store.objects(bindings, None) {
            let Some(policy) = binding
                .at("/spec/policyName")
                .and_then(Value::as_str)
                .and_then(|name| store.get(policies, None, name).ok())
            else {
                continue;
            };
            let policy = self.compiled(&policy);
            // A policy's `matchConstraints` match nothing without rules.
            if policy.constraints.rules.is_empty()
                || !policy
                    .constraints
                    .matches(request, attributes.name, namespace_labels)
            {
                continue;
            }
            if let Some(resources) = binding.at("/spec/matchResources").filter(|r| r.is_object())
                && !Matcher::from_json(resources).matches(
                    request,
                    attributes.name,
                    namespace_labels,
                )
            {
                continue;
            }
            let params = params(store, &policy, &binding, attributes);
            let name = binding
                .at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            invocations.push((
                Invocation {
                    policy,
                    binding: name,
                    params,
                },
                binding,
            ));
        }
        invocations
    }

    /// Carry out every MutatingAdmissionPolicy bound to the request on `object` (`schema`
    /// merges an `ApplyConfiguration`), in binding order, each policy's mutations in order.
    pub(super) fn mutate(
        &self,
        store: &Store,
        attributes: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
        schema: crate::managed::Schema<'_>,
    ) -> Result<(), ApiError> {
        let (Some(policies), Some(bindings)) = (&self.mutating, &self.mutating_bindings) else {
            return Ok(());
        };
        if attributes.rt.group == GROUP || !store.has_any(bindings) {
            return Ok(());
        }
        let snapshot = object.clone();
        let request = match_request(attributes, Some(&snapshot), old);
        let namespace_object = namespace_object(store, attributes, Some(&snapshot));
        let namespace_labels = namespace_object
            .as_ref()
            .map(object_labels)
            .unwrap_or_default();
        let invocations = self.invocations(
            store,
            (policies, bindings),
            attributes,
            &request,
            &namespace_labels,
        );
        for (invocation, _) in invocations {
            let policy = &invocation.policy;
            let refuse = |message: String, reason: &'static str| {
                let message = format!(
                    "policy '{}' with binding '{}' denied request: {message}",
                    policy.name, invocation.binding
                );
                let mut error = ApiError::forbidden(message.clone());
                error.reason = reason;
                error.details = Some(
                    json!({"name": attributes.name, "group": attributes.rt.group,
                    "kind": attributes.rt.plural, "causes": [{"message": message}]}),
                );
                error
            };
            let params = match invocation.params {
                Ok(params) => params,
                Err(error) if policy.fail_closed => {
                    return Err(refuse(
                        format!("failed to configure binding: {error}"),
                        "Forbidden",
                    ));
                }
                Err(_) => continue,
            };
            for param in params {
                let base = |object: &Value| {
                    variables_of(
                        attributes,
                        Some(object),
                        old,
                        &param,
                        namespace_object.as_ref(),
                    )
                };
                let variables = base(object);
                match conditions_hold(policy, &variables) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) if policy.fail_closed => return Err(refuse(error, "Invalid")),
                    Err(_) => continue,
                }
                for mutation in &policy.mutations {
                    // Each mutation sees the object as the ones before it left it.
                    let mut variables = base(object);
                    variables.push(("variables", composed_variables(policy, &variables)));
                    let outcome = mutation
                        .expression
                        .evaluate(&variables)
                        .map_err(|error| {
                            format!(
                                "expression '{}' resulted in error: {error}",
                                mutation.expression.text
                            )
                        })
                        .and_then(|value| expressions::to_json(&value))
                        .and_then(|patch| apply_mutation(object, mutation.apply, &patch, schema));
                    match outcome {
                        Ok(()) => {}
                        Err(error) if policy.fail_closed => return Err(refuse(error, "Invalid")),
                        Err(_) => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn compiled(&self, policy: &Value) -> Arc<Policy> {
        let uid = policy
            .at("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = policy
            .at("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, policy)) = compiled.get(uid)
            && seen == version
        {
            return policy.clone();
        }
        let fresh = Arc::new(Policy::compile(policy));
        compiled.insert(uid.to_owned(), (version.to_owned(), fresh.clone()));
        fresh
    }

    /// Put the request (`object` replacing `old`; a delete has no object) to every policy
    /// bound to it: what they made of it, or the first denial.
    pub(super) fn admit(
        &self,
        store: &Store,
        attributes: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Outcome, ApiError> {
        let mut outcome = Outcome::default();
        let (Some(policies_rt), Some(bindings_rt)) = (&self.policies, &self.bindings) else {
            return Ok(outcome);
        };
        // Policies never apply to the policies themselves (nor to webhook configurations).
        if attributes.rt.group == GROUP || !store.has_any(bindings_rt) {
            return Ok(outcome);
        }
        let request = match_request(attributes, object, old);
        let namespace_object = namespace_object(store, attributes, object.or(old));
        let namespace_labels = namespace_object
            .as_ref()
            .map(object_labels)
            .unwrap_or_default();
        let mut decisions = Vec::new();
        let invocations = self.invocations(
            store,
            (policies_rt, bindings_rt),
            attributes,
            &request,
            &namespace_labels,
        );
        for (invocation, binding) in invocations {
            let policy = invocation.policy.clone();
            let binding_name = invocation.binding.as_str();
            let actions = strings(binding.at("/spec/validationActions"));
            let decide = |message: String, reason: &str, index: usize| Decision {
                policy: policy.name.clone(),
                binding: binding_name.to_owned(),
                message,
                reason: reason.to_owned(),
                index,
                actions: actions.clone(),
            };
            let params = match invocation.params {
                Ok(params) => params,
                Err(error) => {
                    if policy.fail_closed {
                        decisions.push(Decision {
                            actions: vec!["Deny".into()],
                            ..decide(
                                format!("failed to configure binding: {error}"),
                                "Invalid",
                                0,
                            )
                        });
                    }
                    continue;
                }
            };
            for param in params {
                // One runtime cost budget per binding and parameter object, as kube's.
                expressions::cost::with_budget(|| {
                    let mut variables =
                        variables_of(attributes, object, old, &param, namespace_object.as_ref());
                    match conditions_hold(&policy, &variables) {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(error) => {
                            if policy.fail_closed {
                                decisions.push(decide(error, "Invalid", 0));
                            }
                            return;
                        }
                    }
                    variables.push(("variables", composed_variables(&policy, &variables)));
                    for (index, validation) in policy.validations.iter().enumerate() {
                        match validation.expression.evaluate(&variables) {
                        // The budget spent: one decision, and no further expression runs.
                        Err(error) if error == expressions::cost::BUDGET_EXHAUSTED => {
                            if policy.fail_closed {
                                decisions.push(decide(error, "Invalid", index));
                            }
                            return;
                        }
                        Ok(cel::Value::Bool(true)) => {}
                        Ok(cel::Value::Bool(false)) => {
                            let message = validation
                                .message_expression
                                .as_ref()
                                .and_then(|m| expressions::message(m.evaluate(&variables)))
                                .unwrap_or_else(|| {
                                    if validation.message.is_empty() {
                                        format!("failed expression: {}", validation.expression.text)
                                    } else {
                                        validation.message.clone()
                                    }
                                });
                            decisions.push(decide(message, &validation.reason, index));
                        }
                        Ok(_) if policy.fail_closed => decisions.push(decide(
                            format!(
                                "expression '{}' resulted in error: expression did not evaluate to a bool",
                                validation.expression.text
                            ),
                            "Invalid",
                            index,
                        )),
                        Err(error) if policy.fail_closed => decisions.push(decide(
                            format!("expression '{}' resulted in error: {error}", validation.expression.text),
                            "Invalid",
                            index,
                        )),
                        _ => {}
                    }
                    }
                    for (key, expression) in &policy.audit_annotations {
                        if let Ok(cel::Value::String(value)) = expression.evaluate(&variables)
                            && !value.is_empty()
                        {
                            outcome.annotations.push((
                                format!("{}/{key}", policy.name),
                                value.as_str().to_owned(),
                            ));
                        }
                    }
                });
            }
        }
        let mut audited = Vec::new();
        let mut denied = None;
        for decision in decisions {
            let has = |action: &str| decision.actions.iter().any(|a| a == action);
            if has("Warn") {
                outcome.warnings.push(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                    decision.policy, decision.binding, decision.message
                ));
            }
            if has("Audit") {
                audited.push(
                    json!({"message": decision.message, "policy": decision.policy,
                    "binding": decision.binding, "expressionIndex": decision.index,
                    "validationActions": decision.actions}),
                );
            }
            if has("Deny") && denied.is_none() {
                denied = Some(decision);
            }
        }
        if !audited.is_empty() {
            outcome.annotations.push((
                VALIDATION_FAILURE.to_owned(),
                Value::Array(audited).to_string(),
            ));
        }
        match denied {
            Some(decision) => Err(denial(attributes, &decision)),
            None => Ok(outcome),
        }
    }
}

/// Apply one mutation's result to `object`: merge an `ApplyConfiguration`, or carry out a
/// `JSONPatch` (a list of operations).
fn apply_mutation(
    object: &mut Value,
    apply: bool,
    patch: &Value,
    schema: crate::managed::Schema<'_>,
) -> Result<(), String> {
    if apply {
        if !patch.is_object() {
            return Err("apply configuration must evaluate to an object".into());
        }
        crate::managed::merge_configuration(object, patch, schema);
        return Ok(());
    }
    if !patch.is_array() {
        return Err("type mismatch: JSONPatchType.expression should evaluate to array".into());
    }
    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|error| format!("failed to create JSON patch: {error}"))?;
    json_patch::patch(object, &operations).map_err(|error| format!("JSON Patch: {error}"))
}

/// The variables a policy's expressions see (`variables` added once they are composed).
fn variables_of(
    attributes: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
    param: &Value,
    namespace_object: Option<&Value>,
) -> Vec<(&'static str, cel::Value)> {
    let as_cel = |value: Option<&Value>| {
        value.map_or(cel::Value::Null, |v| {
            expressions::json(&crate::managed::expanded(v))
        })
    };
    vec![
        ("object", as_cel(object)),
        ("oldObject", as_cel(old)),
        ("request", expressions::json(&request_variable(attributes))),
        ("params", expressions::json(param)),
        ("namespaceObject", as_cel(namespace_object)),
    ]
}

/// Whether every `matchCondition` holds; an error names the condition that failed.
fn conditions_hold(policy: &Policy, variables: &[(&str, cel::Value)]) -> Result<bool, String> {
    for (name, condition) in &policy.conditions {
        match condition.evaluate(variables) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(_) => {
                return Err(format!(
                    "matchCondition '{name}' did not evaluate to a bool"
                ));
            }
            Err(error) => {
                return Err(format!(
                    "failed to evaluate matchCondition '{name}': expression '{}' resulted in error: {error}",
                    condition.text
                ));
            }
        }
    }
    Ok(true)
}

/// `variables`: each of the policy's variables, in order, each seeing those before it (one
/// that fails is absent, and an expression naming it fails).
fn composed_variables(policy: &Policy, variables: &[(&str, cel::Value)]) -> cel::Value {
    let mut composed: HashMap<cel::objects::Key, cel::Value> = HashMap::new();
    for (name, expression) in &policy.variables {
        let mut scope = variables.to_vec();
        scope.push((
            "variables",
            cel::Value::Map(cel::objects::Map {
                map: Arc::new(composed.clone()),
            }),
        ));
        if let Ok(value) = expression.evaluate(&scope) {
            composed.insert(cel::objects::Key::String(Arc::new(name.clone())), value);
        }
    }
    cel::Value::Map(cel::objects::Map {
        map: Arc::new(composed),
    })
}

/// The request as policies see it: the admission request without its objects.
fn request_variable(attributes: &Attributes<'_>) -> Value {
    let mut request = review(attributes, None, None).request;
    if let Some(fields) = request.as_object_mut() {
        fields.remove("object");
        fields.remove("oldObject");
    }
    request
}

/// The namespace a namespaced request is in (or the Namespace it is on), as `namespaceObject`.
fn namespace_object(
    store: &Store,
    attributes: &Attributes<'_>,
    object: Option<&Value>,
) -> Option<Value> {
    let rt = store.registry().by_kind("", "v1", "Namespace")?;
    if attributes.rt.group.is_empty() && attributes.rt.plural == "namespaces" {
        return object.cloned();
    }
    let namespace = attributes.namespace.filter(|_| attributes.rt.namespaced)?;
    store
        .get(&rt, None, namespace)
        .ok()
        .map(Arc::unwrap_or_clone)
}

/// The parameter objects a binding gives its policy (one `null` without `paramKind`).
fn params(
    store: &Store,
    policy: &Policy,
    binding: &Value,
    attributes: &Attributes<'_>,
) -> Result<Vec<Value>, String> {
    let Some((api_version, kind)) = &policy.param_kind else {
        return Ok(vec![Value::Null]);
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let rt = store
        .registry()
        .by_kind(group, version, kind)
        .ok_or_else(|| format!("paramKind kind `{kind}` not known"))?;
    let Some(reference) = binding.at("/spec/paramRef").filter(|r| r.is_object()) else {
        return Err(format!(
            "policy '{}' has paramKind but binding has no paramRef",
            policy.name
        ));
    };
    let namespace = match reference.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => Some(ns.to_owned()),
        _ if rt.namespaced => match attributes.namespace.filter(|_| attributes.rt.namespaced) {
            Some(ns) => Some(ns.to_owned()),
            None => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                        .into(),
                );
            }
        },
        _ => None,
    };
    let found: Vec<Value> = match reference.get("name").and_then(Value::as_str) {
        Some(name) => store
            .get(&rt, namespace.as_deref(), name)
            .ok()
            .map(|p| vec![Arc::unwrap_or_clone(p)])
            .unwrap_or_default(),
        None => {
            let selector = reference
                .get("selector")
                .and_then(LabelSelector::from_json)
                .unwrap_or_default();
            store
                .objects(&rt, namespace.as_deref())
                .into_iter()
                .filter(|p| selector.matches_object(p))
                .map(Arc::unwrap_or_clone)
                .collect()
        }
    };
    if found.is_empty()
        && reference
            .get("parameterNotFoundAction")
            .and_then(Value::as_str)
            != Some("Allow")
    {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found)
}

/// kube's refusal: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '…' with
/// binding '…' denied request: …`, with the status code of the validation's `reason` (422 for
/// `Invalid`, the default).
fn denial(attributes: &Attributes<'_>, decision: &Decision) -> ApiError {
    let rt = attributes.rt;
    let message = format!(
        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
        decision.policy, decision.binding, decision.message
    );
    let qualified = if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    };
    let text = if attributes.name.is_empty() {
        format!("{qualified} is forbidden: {message}")
    } else {
        format!("{qualified} {:?} is forbidden: {message}", attributes.name)
    };
    let (code, reason) = match decision.reason.as_str() {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    let mut details = json!({"kind": rt.plural, "causes": [{"message": message}]});
    if !attributes.name.is_empty() {
        details["name"] = json!(attributes.name);
    }
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    ApiError {
        code,
        reason,
        message: text,
        details: Some(details),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admissionregistration::Operation;

    fn request(namespaced: bool, group: &'static str, resource: &'static str) -> Request<'static> {
        Request {
            operation: Operation::Create,
            group,
            version: "v1",
            resource,
            subresource: "",
            namespaced,
            object: None,
            old_object: None,
        }
    }

    #[test]
    fn selectors_should_narrow_as_kubes_do() {
        let test = BTreeMap::from([("env".to_owned(), "test".to_owned())]);
        // A binding's `matchResources` with a selector and no rules: the selector alone.
        let binding = Matcher::from_json(
            &serde_json::json!({"namespaceSelector": {"matchLabels": {"env": "test"}}}),
        );
        let deployments = request(true, "apps", "deployments");
        assert!(binding.matches(&deployments, "web", &test));
        assert!(!binding.matches(&deployments, "web", &BTreeMap::new()));
        // A request with no namespace passes any namespace selector.
        let everything = Matcher::from_json(&serde_json::json!({
            "resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                "resources": ["*"]}],
            "namespaceSelector": {"matchLabels": {"env": "test"}}}));
        let bindings = request(false, "rbac.authorization.k8s.io", "clusterrolebindings");
        assert!(everything.matches(&bindings, "admins", &BTreeMap::new()));
        assert!(!everything.matches(&deployments, "web", &BTreeMap::new()));
    }
}
