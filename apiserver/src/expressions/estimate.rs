//! A rule's worst-case cost, estimated before it ever runs, as cel-go's `checker/cost.go`
//! estimates it for kube: each node of the expression costs what cel-go says (an identifier 1,
//! a field 1, a list literal 10, a regex match by the lengths of string and pattern, a
//! comprehension its body times the most items its range can hold), and the sizes come from
//! the schema: `maxItems`, `maxProperties`, `maxLength` (four bytes a character), or, with no
//! bound, as many as the largest request (3 MiB) could hold. A rule deep in unbounded lists
//! runs once per item of each: its cost is multiplied by their sizes too.

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use serde_json::Value;

/// The largest request body kube-apiserver accepts, which bounds what a schema leaves open.
const MAX_REQUEST_BYTES: f64 = 3.0 * 1024.0 * 1024.0;

/// The least a value of `schema` takes serialized (kube's `MinSerializedSize`).
fn min_size(schema: Option<&Value>) -> f64 {
    match schema
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "boolean" => 4.0,
        "integer" | "number" => 1.0,
        _ => 2.0,
    }
}

/// The most items (array), entries (map) or bytes (string) a value of `schema` can have.
pub fn max_size(schema: Option<&Value>) -> f64 {
    let Some(schema) = schema else {
        return 1.0;
    };
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    match schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "array" => bound("maxItems")
            .unwrap_or_else(|| (MAX_REQUEST_BYTES - 2.0) / (min_size(schema.get("items")) + 1.0)),
        "object" => bound("maxProperties").unwrap_or_else(|| {
            (MAX_REQUEST_BYTES - 2.0) / (min_size(schema.get("additionalProperties")) + 6.0)
        }),
        "string" => bound("maxLength").map(|n| n * 4.0).unwrap_or_else(|| {
            schema
                .get("enum")
                .and_then(Value::as_array)
                .map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .map(|s| s.len() as f64)
                        .fold(0.0, f64::max)
                })
                .unwrap_or(MAX_REQUEST_BYTES - 2.0)
        }),
        _ => 1.0,
    }
}

/// Variables in scope and the schemas of their values.
type Scope<'a> = Vec<(String, Option<&'a Value>)>;

/// The estimated cost of `expr` with `self` of `schema`.
pub fn cost(expr: &IdedExpr, schema: &Value) -> f64 {
    let scope: Scope<'_> = vec![
        ("self".into(), Some(schema)),
        ("oldSelf".into(), Some(schema)),
    ];
    node(expr, &scope)
}

/// The schema of the value `expr` names, where it names one (`self.a.b`, `x` of `self.l.all(x,
/// …)`, `self.l[0]`).
fn schema_of<'a>(expr: &IdedExpr, scope: &Scope<'a>) -> Option<&'a Value> {
    match &expr.expr {
        Expr::Ident(name) => scope.iter().rev().find(|(n, _)| n == name)?.1,
        Expr::Select(select) => {
            let parent = schema_of(&select.operand, scope)?;
            parent
                .get("properties")
                .and_then(|p| p.get(&select.field))
                .or_else(|| parent.get("additionalProperties").filter(|a| a.is_object()))
        }
        Expr::Call(call) if call.func_name == "_[_]" => {
            let parent = schema_of(call.args.first()?, scope)?;
            parent
                .get("items")
                .or_else(|| parent.get("additionalProperties").filter(|a| a.is_object()))
        }
        _ => None,
    }
}

/// The size of `expr`'s value: a literal's own, a computed value's from what it is computed
/// of (a `map` or `filter` as large as its range, a concatenation the sum of its parts, a
/// `replace` its target times the replacement), else its schema's bound.
fn size_of(expr: &IdedExpr, scope: &Scope<'_>) -> f64 {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().len() as f64,
        Expr::List(list) => list.elements.len() as f64,
        Expr::Map(map) => map.entries.len() as f64,
        Expr::Comprehension(c) => size_of(&c.iter_range, scope),
        Expr::Call(call) => {
            let target = || call.target.as_ref().map_or(1.0, |t| size_of(t, scope));
            let arg = |i: usize| call.args.get(i).map_or(1.0, |a| size_of(a, scope));
            match call.func_name.as_str() {
                "_+_" => arg(0) + arg(1),
                "replace" => target() * arg(1).max(1.0),
                "split" | "join" | "lowerAscii" | "upperAscii" | "trim" | "substring"
                | "findAll" => target(),
                _ => max_size(schema_of(expr, scope)),
            }
        }
        _ => max_size(schema_of(expr, scope)),
    }
}

fn node(expr: &IdedExpr, scope: &Scope<'_>) -> f64 {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => 0.0,
        Expr::Ident(_) => 1.0,
        Expr::Select(select) => 1.0 + node(&select.operand, scope),
        Expr::List(list) => 10.0 + list.elements.iter().map(|e| node(e, scope)).sum::<f64>(),
        Expr::Map(_) | Expr::Struct(_) => 30.0,
        Expr::Comprehension(c) => {
            let items = size_of(&c.iter_range, scope);
            let range = schema_of(&c.iter_range, scope);
            let item = range.and_then(|r| {
                r.get("items")
                    .or_else(|| r.get("additionalProperties").filter(|a| a.is_object()))
            });
            let mut inner = scope.clone();
            inner.push((c.iter_var.clone(), item));
            inner.push((c.accu_var.clone(), None));
            node(&c.iter_range, scope)
                + node(&c.accu_init, scope)
                + node(&c.result, &inner)
                + items * (node(&c.loop_cond, &inner) + node(&c.loop_step, &inner))
        }
        Expr::Call(call) => {
            let args: f64 = call.args.iter().map(|a| node(a, scope)).sum::<f64>()
                + call.target.as_ref().map_or(0.0, |t| node(t, scope));
            let target_size = || {
                call.target
                    .as_ref()
                    .map(|t| size_of(t, scope))
                    .or_else(|| call.args.first().map(|a| size_of(a, scope)))
                    .unwrap_or(1.0)
            };
            let arg_size = |i: usize| call.args.get(i).map_or(1.0, |a| size_of(a, scope));
            match call.func_name.as_str() {
                "_&&_" | "_||_" => args,
                "_?_:_" => {
                    node(&call.args[0], scope)
                        + call.args[1..]
                            .iter()
                            .map(|a| node(a, scope))
                            .fold(0.0, f64::max)
                }
                "matches" | "find" | "findAll" => {
                    args + 1.0
                        + ((target_size() + 1.0) * 0.1).ceil()
                            * (arg_size(if call.target.is_some() { 0 } else { 1 }) * 0.25).ceil()
                }
                "contains" | "startsWith" | "endsWith" | "lowerAscii" | "upperAscii" | "trim"
                | "substring" | "indexOf" | "lastIndexOf" => {
                    args + 1.0 + (target_size() * 0.1).ceil()
                }
                "replace" | "split" => args + 1.0 + (target_size() * 0.2).ceil(),
                "_==_" | "_!=_" | "_+_" => {
                    let shorter = arg_size(0).min(arg_size(1));
                    args + 1.0 + (shorter * 0.1).ceil()
                }
                "@in" => args + 1.0 + arg_size(1),
                "isSorted" | "sum" | "min" | "max" | "join" => args + 1.0 + target_size(),
                _ => args + 1.0,
            }
        }
    }
}

/// How many times a rule at the end of `ancestors` (the schemas from the root down, not
/// including its own) may run: the product of the sizes of the arrays and maps it is under.
pub fn cardinality(ancestors: &[&Value]) -> f64 {
    ancestors
        .iter()
        .filter(|s| {
            matches!(s.get("type").and_then(Value::as_str), Some("array"))
                || s.get("additionalProperties").is_some_and(Value::is_object)
        })
        .map(|s| max_size(Some(s)))
        .product()
}

/// kube's `getCostErrorMessage`.
pub fn exceeds(what: &str, cost: f64, limit: f64) -> String {
    let factor = cost / limit;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}
