//! CEL expressions: CRD validation rules (`x-kubernetes-validations`), as apiextensions-apiserver checks them
//! when a CRD is written and evaluates them on every write of its custom resources
//! (`pkg/apiserver/schema/cel`): each rule compiled once per CRD version (the schema's
//! [`rules_for`] cache), evaluated with `self` the value at its schema node and, for a
//! transition rule, `oldSelf` the value it replaces (only on an update, and only where the old
//! value correlates: properties, map entries, the items of a `list-type: map` by key — unless
//! `optionalOldSelf`); a false rule is a cause of the 422 with its `message`,
//! `messageExpression`, `reason` and `fieldPath`, worded as kube 1.36 words them.
//!
//! At CRD creation ([`check`]) a rule that does not parse, names what it may not, misuses
//! `oldSelf` or costs more than kube's static budget (10 000 000 per rule, 100 000 000 per
//! schema, estimated from the schema's bounds) is refused with kube's message.
//!
//! Differences from kube: no type checker (a rule that is not a bool, or names a field the
//! schema has not, fails when it runs, not at creation), compile errors carry the `cel`
//! crate's parser messages and no position for undeclared references, the runtime cost is
//! metered in kube's units within a small factor ([`cost`]), failing rules on unchanged values are not
//! ratcheted into warnings, and the library lacks URLs, quantities, IPs, `format`, semver,
//! sets and `type()` ([`library`]).

pub mod cost;
mod estimate;
mod library;
mod value;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::Value;

use krec_core::error::Cause;

/// The variables an admission policy's expressions may name.
pub const POLICY_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
];

/// kube's `StaticEstimatedCostLimit`: the most one rule may be estimated to cost.
pub const RULE_COST_LIMIT: f64 = 10_000_000.0;
/// kube's `StaticEstimatedCRDCostLimit`: the most a schema's rules may cost together.
pub const SCHEMA_COST_LIMIT: f64 = 100_000_000.0;

/// One compiled rule.
struct Rule {
    text: String,
    expr: IdedExpr,
    message: String,
    message_expression: Option<IdedExpr>,
    reason: Option<String>,
    /// `fieldPath` as a path suffix (`.x.y`, `[key]`).
    field_path: String,
    uses_old_self: bool,
    optional_old_self: bool,
}

/// The compiled rules of a schema node and of the nodes below it that have any.
pub struct Rules {
    schema: Value,
    rules: Vec<Rule>,
    properties: Vec<(String, Rules)>,
    items: Option<Box<Rules>>,
    additional: Option<Box<Rules>>,
}

static COMPILATIONS: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
/// How many schemas' rules have been compiled in this process (each once, whatever the number
/// of writes).
pub fn compilations() -> u64 {
    COMPILATIONS.load(Ordering::Relaxed)
}

type Cache = Vec<(Weak<Value>, Option<Arc<Rules>>)>;

static CACHE: Mutex<Cache> = Mutex::new(Vec::new());

/// The compiled rules of `schema` (a served CRD version's), compiled the first time they are
/// asked for; `None` when it has none.
pub fn rules_for(schema: &Arc<Value>) -> Option<Arc<Rules>> {
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, rules)) = cache
        .iter()
        .find(|(weak, _)| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(schema)))
    {
        return rules.clone();
    }
    cache.retain(|(weak, _)| weak.strong_count() > 0);
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let rules = Rules::compile(schema).map(Arc::new);
    cache.push((Arc::downgrade(schema), rules.clone()));
    rules
}

/// The longest expression kube takes (`ExpressionSizeCodePointLimit`).
const MAX_EXPRESSION_CHARS: usize = 100_000;

/// The deepest an expression may nest: deep enough for any rule a person writes, shallow
/// enough that evaluating it cannot exhaust a thread's stack.
const MAX_DEPTH: usize = 128;

fn parse(source: &str) -> Result<IdedExpr, String> {
    let chars = source.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(format!(
            "ERROR: <input>: expression code point size exceeds limit: size: {chars}, limit {MAX_EXPRESSION_CHARS}"
        ));
    }
    let source = source.to_owned();
    // The parser recurses once per operator of a chain (`1+1+…`): it runs, and a tree too deep
    // to evaluate is refused, on a thread with room for that.
    std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(256 << 20)
        .spawn(move || {
            let expr = cel::parser::Parser::new()
                .enable_optional_syntax(true)
                .max_recursion_depth(96)
                .parse(&source)
                // cel-go's layout of the offending line.
                .map_err(|errors| errors.to_string().replace("\n| ", "\n | "))?;
            if depth(&expr) > MAX_DEPTH {
                return Err(format!(
                    "ERROR: <input>: expression nested deeper than {MAX_DEPTH} levels"
                ));
            }
            Ok(expr)
        })
        .map_err(|err| format!("cannot parse: {err}"))?
        .join()
        .unwrap_or_else(|_| Err("internal error parsing the expression".into()))
}

/// The value of a map entry or object field.
fn entry_value(entry: &cel::common::ast::IdedEntryExpr) -> &IdedExpr {
    match &entry.expr {
        EntryExpr::MapEntry(entry) => &entry.value,
        EntryExpr::StructField(field) => &field.value,
    }
}

/// How deep `expr` nests.
fn depth(expr: &IdedExpr) -> usize {
    let deepest = |exprs: &mut dyn Iterator<Item = &IdedExpr>| exprs.map(depth).max().unwrap_or(0);
    1 + match &expr.expr {
        Expr::Call(call) => deepest(&mut call.target.iter().map(|t| &**t).chain(&call.args)),
        Expr::Select(select) => depth(&select.operand),
        Expr::List(list) => deepest(&mut list.elements.iter()),
        Expr::Map(map) => deepest(&mut map.entries.iter().map(entry_value)),
        Expr::Struct(construction) => deepest(&mut construction.entries.iter().map(entry_value)),
        Expr::Comprehension(c) => deepest(
            &mut [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
            .into_iter(),
        ),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

impl Rules {
    /// The rules under `schema`; `None` without any. A rule that does not compile is left out
    /// (CRD validation refused it, unless the stored CRD already had it).
    fn compile(schema: &Value) -> Option<Rules> {
        let rules: Vec<Rule> = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|rule| {
                let source = text(rule, "rule");
                let expr = parse(source).ok()?;
                Some(Rule {
                    text: source.trim().to_owned(),
                    uses_old_self: mentions(&expr, "oldSelf"),
                    expr: cost::metered(&expr),
                    message: text(rule, "message").trim().to_owned(),
                    message_expression: rule
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .and_then(|m| parse(m).ok())
                        .map(|m| cost::metered(&m)),
                    reason: rule
                        .get("reason")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    field_path: normalize_field_path(text(rule, "fieldPath")),
                    optional_old_self: rule.get("optionalOldSelf") == Some(&Value::Bool(true)),
                })
            })
            .collect();
        let properties: Vec<(String, Rules)> = schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, child)| Some((name.clone(), Rules::compile(child)?)))
            .collect();
        let items = schema.get("items").and_then(Rules::compile).map(Box::new);
        let additional = schema
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .and_then(Rules::compile)
            .map(Box::new);
        let empty =
            rules.is_empty() && properties.is_empty() && items.is_none() && additional.is_none();
        (!empty).then(|| Rules {
            schema: schema.clone(),
            rules,
            properties,
            items,
            additional,
        })
    }

    /// The causes of a 422 for `object` (replacing `old`): every rule that does not hold, or
    /// could not be evaluated.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        // One budget for all the object's rules.
        cost::with_budget(|| {
            ROOT.with(|root| self.walk(root, object, old, "", true, &mut causes));
        });
        causes
    }

    fn walk(
        &self,
        root: &cel::Context<'static>,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        resource: bool,
        causes: &mut Vec<Cause>,
    ) {
        // Only values that are there are validated; none once the budget is spent.
        if value.is_null() || cost::exhausted() {
            return;
        }
        if !self.rules.is_empty() {
            self.evaluate(root, value, old, path, resource, causes);
        }
        let child = |suffix: String| {
            if path.is_empty() {
                suffix.trim_start_matches('.').to_owned()
            } else {
                format!("{path}{suffix}")
            }
        };
        for (name, rules) in &self.properties {
            if let Some(field) = value.get(name) {
                let old = old.and_then(|o| o.get(name));
                rules.walk(root, field, old, &child(format!(".{name}")), false, causes);
            }
        }
        if let (Some(rules), Some(items)) = (&self.items, value.as_array()) {
            let keys = map_keys(&self.schema);
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                // Only the items of a map-list correlate with old ones (by their keys).
                let old = keys.as_ref().and_then(|keys| {
                    old_items?
                        .iter()
                        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
                });
                rules.walk(root, item, old, &child(format!("[{i}]")), false, causes);
            }
        }
        if let (Some(rules), Some(entries)) = (&self.additional, value.as_object()) {
            for (key, entry) in entries {
                let old = old.and_then(|o| o.get(key));
                rules.walk(root, entry, old, &child(format!("[{key}]")), false, causes);
            }
        }
    }

    fn evaluate(
        &self,
        root: &cel::Context<'static>,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        resource: bool,
        causes: &mut Vec<Cause>,
    ) {
        let this = value::to_cel(Some(&self.schema), value, resource);
        let before = old.map(|o| value::to_cel(Some(&self.schema), o, resource));
        let node_type = text(&self.schema, "type");
        let at = if path.is_empty() { "<nil>" } else { path };
        for rule in &self.rules {
            if cost::exhausted() {
                return;
            }
            if rule.uses_old_self && before.is_none() && !rule.optional_old_self {
                // A transition rule needs a value to compare with.
                continue;
            }
            let mut scope = root.new_inner_scope();
            scope.add_variable_from_value("self", this.clone());
            if rule.uses_old_self {
                let old_self = if rule.optional_old_self {
                    let optional = match &before {
                        Some(v) => cel::objects::OptionalValue::of(v.clone()),
                        None => cel::objects::OptionalValue::none(),
                    };
                    cel::Value::Opaque(Arc::new(optional))
                } else {
                    before.clone().unwrap_or(cel::Value::Null)
                };
                scope.add_variable_from_value("oldSelf", old_self);
            }
            let outcome = run(&rule.expr, &scope);
            let rule_text = if rule.message.is_empty() {
                rule.text.as_str()
            } else {
                rule.message.as_str()
            };
            match outcome {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => {
                    let detail = rule
                        .message_expression
                        .as_ref()
                        .and_then(|m| message(run(m, &scope)))
                        .unwrap_or_else(|| {
                            if rule.message.is_empty() {
                                format!("failed rule: {}", rule.text)
                            } else {
                                rule.message.clone()
                            }
                        });
                    let field = if rule.field_path.is_empty() {
                        at.to_owned()
                    } else if path.is_empty() {
                        rule.field_path.trim_start_matches('.').to_owned()
                    } else {
                        format!("{path}{}", rule.field_path)
                    };
                    causes.push((field, failure(value, rule.reason.as_deref(), &detail)));
                }
                Ok(_) => causes.push((
                    at.to_owned(),
                    format!(
                        "Invalid value: {node_type:?}: rule did not evaluate to a bool evaluating rule: {rule_text}"
                    ),
                )),
                Err(error) if error == cost::BUDGET_EXHAUSTED => {
                    causes.push((at.to_owned(), format!("Invalid value: {node_type:?}: {error}")));
                }
                Err(error) if error == cost::CALL_LIMIT_EXCEEDED => {
                    causes.push((
                        at.to_owned(),
                        format!(
                            "Invalid value: {node_type:?}: '{error}': no further validation rules will be run due to call cost exceeds limit for rule: {rule_text}"
                        ),
                    ));
                    cost::stop();
                }
                Err(error) if error == "no such overload" => causes.push((
                    at.to_owned(),
                    format!(
                        "Invalid value: {node_type:?}: '{error}': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
                    ),
                )),
                Err(error) => causes.push((
                    at.to_owned(),
                    format!("Invalid value: {node_type:?}: {error} evaluating rule: {rule_text}"),
                )),
            }
        }
    }
}

/// `source` parsed (optional syntax on, as kube's environment has it), or the parse errors in
/// cel-go's layout. Object constructions (`Object{spec: Object.spec{…}}`, `JSONPatch{op: …}`,
/// which a mutating admission policy writes) become maps, which the `cel` crate evaluates.
pub(crate) fn compile(source: &str) -> Result<IdedExpr, String> {
    let mut expr = parse(source)?;
    structs_to_maps(&mut expr);
    Ok(expr)
}

/// Rewrite every `Type{field: value}` construction in `expr` as the map `{"field": value}`.
fn structs_to_maps(expr: &mut IdedExpr) {
    use cel::common::ast::{IdedEntryExpr, LiteralValue, MapEntryExpr, MapExpr};
    match &mut expr.expr {
        Expr::Struct(construction) => {
            let entries = std::mem::take(&mut construction.entries)
                .into_iter()
                .filter_map(|entry| match entry.expr {
                    EntryExpr::StructField(mut field) => {
                        structs_to_maps(&mut field.value);
                        Some(IdedEntryExpr {
                            id: entry.id,
                            expr: EntryExpr::MapEntry(MapEntryExpr {
                                key: IdedExpr {
                                    id: entry.id,
                                    expr: Expr::Literal(LiteralValue::String(field.field.into())),
                                },
                                value: field.value,
                                optional: field.optional,
                            }),
                        })
                    }
                    EntryExpr::MapEntry(_) => None,
                })
                .collect();
            expr.expr = Expr::Map(MapExpr { entries });
        }
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                structs_to_maps(target);
            }
            call.args.iter_mut().for_each(structs_to_maps);
        }
        Expr::Select(select) => structs_to_maps(&mut select.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(structs_to_maps),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(entry) = &mut entry.expr {
                    structs_to_maps(&mut entry.key);
                    structs_to_maps(&mut entry.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                structs_to_maps(part);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// What a `messageExpression` gave, if it is a message: a string, trimmed, not empty, on one
/// line, at most 5 KiB (else the rule's own message is used, as kube does).
pub(crate) fn message(result: Result<cel::Value, String>) -> Option<String> {
    match result {
        Ok(cel::Value::String(text)) => {
            let text = text.trim();
            (!text.is_empty() && !text.contains('\n') && text.len() <= 5 * 1024)
                .then(|| text.to_owned())
        }
        _ => None,
    }
}

/// A CEL value as JSON (what a mutation's expression built).
///
/// # Errors
///
/// A value JSON cannot hold (a function, an opaque value).
pub(crate) fn to_json(value: &cel::Value) -> Result<Value, String> {
    Ok(match value {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a JSON number"))?,
        cel::Value::String(s) => Value::String(s.as_str().to_owned()),
        cel::Value::Bytes(b) => {
            use base64::Engine as _;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        cel::Value::List(items) => {
            Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        cel::Value::Map(map) => {
            let mut object = serde_json::Map::new();
            for (key, value) in map.map.iter() {
                let key = match key {
                    cel::objects::Key::String(s) => s.as_str().to_owned(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                object.insert(key, to_json(value)?);
            }
            Value::Object(object)
        }
        cel::Value::Timestamp(t) => {
            Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        }
        cel::Value::Duration(d) => {
            Value::String(format!("{}s", d.num_milliseconds() as f64 / 1000.0))
        }
        other => return Err(format!("{other:?} cannot be written as JSON")),
    })
}

/// The first name `expr` uses that is neither one of `variables` nor a function rules may call,
/// as cel-go reports it (`undeclared reference to 'x' (in container '')`).
pub(crate) fn undeclared(expr: &IdedExpr, variables: &[&str]) -> Option<String> {
    let (mut names, mut functions) = (Vec::new(), Vec::new());
    identifiers(expr, &mut Vec::new(), &mut names, &mut functions);
    names
        .iter()
        .filter(|n| !variables.contains(&n.as_str()))
        .chain(
            functions
                .iter()
                .filter(|f| !library::FUNCTIONS.contains(&f.as_str())),
        )
        .next()
        .map(|name| format!("ERROR: <input>: undeclared reference to '{name}' (in container '')"))
}

/// A JSON value as CEL sees it without a schema (an admission policy's `object`, `params`).
pub(crate) fn json(value: &Value) -> cel::Value {
    value::to_cel(None, value, false)
}

/// Evaluate `expr` with `variables` bound: its value, or the error as cel-go words it.
pub(crate) fn evaluate(
    expr: &IdedExpr,
    variables: &[(&str, cel::Value)],
) -> Result<cel::Value, String> {
    ROOT.with(|root| {
        let mut scope = root.new_inner_scope();
        for (name, value) in variables {
            scope.add_variable_from_value(*name, value.clone());
        }
        run(expr, &scope)
    })
}

thread_local! {
    /// The functions rules may call, registered once per thread.
    static ROOT: cel::Context<'static> = library::context();
}

/// Evaluate `expr` (a [`cost::metered`] one), charged to the current budget: its value, or
/// the error as cel-go words it — [`cost::CALL_LIMIT_EXCEEDED`] past the per-call limit,
/// [`cost::BUDGET_EXHAUSTED`] when it cost more than the budget had left.
fn run(expr: &IdedExpr, scope: &cel::Context<'_>) -> Result<cel::Value, String> {
    cost::start_call();
    // The `cel` crate has panicking corners; a rule must not take the server down.
    let result =
        match std::panic::catch_unwind(AssertUnwindSafe(|| cel::Value::resolve(expr, scope))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(go_error(&error)),
            Err(_) => Err("internal error".into()),
        };
    match cost::end_call() {
        Err(exhausted) => Err(exhausted.to_owned()),
        Ok(_) => result,
    }
}

/// An evaluation error in cel-go's words (kube's messages quote them).
fn go_error(error: &cel::ExecutionError) -> String {
    use cel::ExecutionError as E;
    match error {
        E::NoSuchKey(key) => format!("no such key: {key}"),
        E::NoSuchOverload | E::UnsupportedBinaryOperator(..) | E::UnsupportedUnaryOperator(..) => {
            "no such overload".into()
        }
        E::IndexOutOfBounds(index) => format!("index out of bounds: {}", show(index)),
        E::DivisionByZero(_) => "division by zero".into(),
        E::RemainderByZero(_) => "modulus by zero".into(),
        E::Overflow(..) => "integer overflow".into(),
        E::UndeclaredReference(name) => format!("undeclared reference to '{name}'"),
        E::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn show(value: &cel::Value) -> String {
    match value {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        other => format!("{other:?}"),
    }
}

/// A false rule's cause, as kube 1.36 words it: a scalar's value shown, an object's or list's
/// not; `reason` choosing the kind of error.
fn failure(value: &Value, reason: Option<&str>, detail: &str) -> String {
    let shown = match value {
        Value::String(s) => Some(format!("{s:?}")),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match (reason, shown) {
        (Some("FieldValueForbidden"), _) => format!("Forbidden: {detail}"),
        (Some("FieldValueRequired"), _) => format!("Required value: {detail}"),
        (Some("FieldValueDuplicate"), Some(v)) => format!("Duplicate value: {v}"),
        (Some("FieldValueDuplicate"), None) => "Duplicate value".into(),
        (_, Some(v)) => format!("Invalid value: {v}: {detail}"),
        (_, None) => format!("Invalid value: {detail}"),
    }
}

/// A `fieldPath` (`.spec.x`, `.m['key']`) as the suffix kube appends to a rule's path.
fn normalize_field_path(field_path: &str) -> String {
    field_path
        .replace("['", "[")
        .replace("']", "]")
        .replace("[\"", "[")
        .replace("\"]", "]")
}

/// A map-list's keys (`x-kubernetes-list-type: map`), by which its items correlate.
fn map_keys(schema: &Value) -> Option<Vec<String>> {
    (text(schema, "x-kubernetes-list-type") == "map").then(|| {
        schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    })
}

/// Whether `expr` names the variable `name` anywhere.
fn mentions(expr: &IdedExpr, name: &str) -> bool {
    let mut names = Vec::new();
    identifiers(expr, &mut Vec::new(), &mut names, &mut Vec::new());
    names.iter().any(|n| n == name)
}

/// The free identifiers `expr` names (`names`, not bound by a comprehension) and the functions
/// it calls that are not operators (`functions`).
fn identifiers(
    expr: &IdedExpr,
    bound: &mut Vec<String>,
    names: &mut Vec<String>,
    functions: &mut Vec<String>,
) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) {
                names.push(name.clone());
            }
        }
        Expr::Select(select) => identifiers(&select.operand, bound, names, functions),
        Expr::Call(call) => {
            let operator = call.func_name.starts_with('_')
                || call.func_name.starts_with('@')
                || matches!(call.func_name.as_str(), "!_" | "-_");
            if !operator {
                functions.push(call.func_name.clone());
            }
            if let Some(target) = &call.target {
                identifiers(target, bound, names, functions);
            }
            for arg in &call.args {
                identifiers(arg, bound, names, functions);
            }
        }
        Expr::List(list) => {
            for element in &list.elements {
                identifiers(element, bound, names, functions);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    identifiers(&entry.key, bound, names, functions);
                    identifiers(&entry.value, bound, names, functions);
                }
            }
        }
        Expr::Comprehension(c) => {
            identifiers(&c.iter_range, bound, names, functions);
            identifiers(&c.accu_init, bound, names, functions);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                identifiers(part, bound, names, functions);
            }
            bound.truncate(depth);
        }
        Expr::Literal(_) | Expr::Struct(_) | Expr::Unspecified => {}
    }
}

/// A rule as kube's message prints it (Go's `%#v` of `apiextensions.ValidationRule`).
fn go_rule(rule: &Value) -> String {
    let pointer = |key: &str, kind: &str| match rule.get(key) {
        None | Some(Value::Null) => format!("(*{kind})(nil)"),
        Some(_) => format!("(*{kind})(0xc000000000)"),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{}, FieldPath:{:?}, OptionalOldSelf:{}}}",
        text(rule, "rule"),
        text(rule, "message"),
        text(rule, "messageExpression"),
        pointer("reason", "apiextensions.FieldValueErrorReason"),
        text(rule, "fieldPath"),
        pointer("optionalOldSelf", "bool"),
    )
}

/// What kube refuses in a CRD schema's rules at `path` (its `openAPIV3Schema`): rules that do
/// not compile, name what they may not, misuse `oldSelf`, or cost more than the budget.
pub fn check(schema: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0.0;
    check_node(schema, path, &mut Vec::new(), true, &mut total, &mut causes);
    if total > SCHEMA_COST_LIMIT {
        causes.push((
            path.to_owned(),
            format!(
                "Forbidden: {}",
                estimate::exceeds(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total,
                    SCHEMA_COST_LIMIT
                )
            ),
        ));
    }
    causes
}

fn check_node<'a>(
    node: &'a Value,
    path: &str,
    ancestors: &mut Vec<&'a Value>,
    correlatable: bool,
    total: &mut f64,
    causes: &mut Vec<Cause>,
) {
    for (i, rule) in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let source = text(rule, "rule");
        if source.trim().is_empty() {
            continue;
        }
        let expr = match parse(source) {
            Ok(expr) => expr,
            Err(errors) => {
                causes.push((
                    format!("{at}.rule"),
                    format!(
                        "Invalid value: {}: compilation failed: {errors}",
                        go_rule(rule)
                    ),
                ));
                continue;
            }
        };
        if let Some(error) = undeclared(&expr, &["self", "oldSelf"]) {
            causes.push((
                format!("{at}.rule"),
                format!(
                    "Invalid value: {}: compilation failed: {error}",
                    go_rule(rule)
                ),
            ));
            continue;
        }
        let uses_old_self = mentions(&expr, "oldSelf");
        if rule.get("optionalOldSelf") == Some(&Value::Bool(true)) && !uses_old_self {
            causes.push((
                format!("{at}.optionalOldSelf"),
                "Forbidden: may not be set if oldSelf is not used in rule".into(),
            ));
        }
        if uses_old_self && !correlatable {
            causes.push((
                format!("{at}.rule"),
                format!(
                    "Forbidden: oldSelf cannot be used on the uncorrelatable portion of the schema within {path}"
                ),
            ));
        }
        if let Some(message) = rule.get("messageExpression").and_then(Value::as_str)
            && let Err(errors) = parse(message)
        {
            causes.push((
                format!("{at}.messageExpression"),
                format!(
                    "Invalid value: {}: messageExpression compilation failed: {errors}",
                    go_rule(rule)
                ),
            ));
        }
        let cost = estimate::cost(&expr, node) * estimate::cardinality(ancestors);
        *total += cost;
        if cost > RULE_COST_LIMIT {
            causes.push((
                format!("{at}.rule"),
                format!(
                    "Forbidden: {}",
                    estimate::exceeds("estimated rule cost", cost, RULE_COST_LIMIT)
                ),
            ));
        }
    }
    ancestors.push(node);
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort();
        for name in names {
            let child = &properties[name];
            check_node(
                child,
                &format!("{path}.properties[{name}]"),
                ancestors,
                correlatable,
                total,
                causes,
            );
        }
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        // Only a map-list's items correlate with old ones.
        let correlates = correlatable && text(node, "x-kubernetes-list-type") == "map";
        check_node(
            items,
            &format!("{path}.items"),
            ancestors,
            correlates,
            total,
            causes,
        );
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(
            additional,
            &format!("{path}.additionalProperties"),
            ancestors,
            correlatable,
            total,
            causes,
        );
    }
    ancestors.pop();
}

#[cfg(test)]
mod tests;
