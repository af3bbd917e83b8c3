//! The `Table` kube-apiserver answers to `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`
//! (what `kubectl get` asks for): the columns and rows of the kind's strategy, or a CRD
//! version's `additionalPrinterColumns`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::printers::{Column, NAME, Row, age_since};
use crate::resources::ResourceType;
use krec_core::json::Pointer;

/// How a row's cells are computed from an object.
type Cells = dyn Fn(&Value) -> Vec<Value>;

/// The Table of `objects` of `rt`. `include` is the request's `includeObject` (`None`,
/// `Metadata` — the default — or `Object`).
pub fn table(
    rt: &ResourceType,
    objects: Vec<Arc<Value>>,
    list_meta: Value,
    include: &str,
) -> Value {
    let now = jiff::Timestamp::now();
    let (columns, cells): (Vec<Value>, Box<Cells>) = if rt.printer_columns.is_empty() {
        let strategy = super::strategy(rt);
        (
            strategy.columns().iter().map(Column::definition).collect(),
            Box::new(move |object| strategy.cells(&Row { object, now })),
        )
    } else {
        custom_columns(rt, now)
    };
    let rows: Vec<Value> = objects
        .into_iter()
        .map(|o| {
            let cells = cells(&o);
            let mut object = match include {
                "None" => Value::Null,
                "Object" => Arc::unwrap_or_clone(o),
                _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or_default()}),
            };
            // As clients see it: `fieldsV1` as JSON, not the stored text.
            crate::managed::expand(&mut object);
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": columns, "rows": rows})
}

/// A CRD version's `additionalPrinterColumns` (with NAME first; AGE by default).
fn custom_columns(rt: &ResourceType, now: jiff::Timestamp) -> (Vec<Value>, Box<Cells>) {
    let mut columns = vec![NAME.definition()];
    let specs = rt.printer_columns.clone();
    for c in &specs {
        columns.push(json!({"name": c["name"], "type": c["type"],
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": c.get("description").cloned().unwrap_or(json!("")),
            "priority": c.get("priority").cloned().unwrap_or(json!(0))}));
    }
    let cells = move |o: &Value| -> Vec<Value> {
        let mut cells = vec![json!(
            o.at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )];
        for c in &specs {
            let path = c["jsonPath"].as_str().unwrap_or_default();
            let value = json_path(o, path);
            cells.push(match (c["type"].as_str(), value) {
                (_, None) => Value::Null,
                (Some("date"), Some(v)) => json!(age_since(Some(v), now)),
                // A string column prints whatever it finds as text, as kube's does.
                (Some("string"), Some(v)) if !v.is_string() => json!(v.to_string()),
                (_, Some(v)) => v.clone(),
            });
        }
        cells
    };
    (columns, Box::new(cells))
}

/// The first value a printer column's JSONPath finds, as kube-apiserver's table convertor
/// takes it: fields (`.spec.replicas`, `['a.b']`), indexes (`[0]`, `[-1]`), `[*]`, and filters
/// (`[?(@.type=="Ready")]`, `!=`, or a bare `[?(@.field)]` for presence).
fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    select(vec![object], path).into_iter().next()
}

/// Every value `path` (after its root) reaches from `at`.
fn select<'a>(mut at: Vec<&'a Value>, mut path: &str) -> Vec<&'a Value> {
    while !path.is_empty() && !at.is_empty() {
        if let Some(rest) = path.strip_prefix('[') {
            let Some(close) = bracket_end(rest) else {
                return Vec::new();
            };
            let inner = rest[..close].trim();
            path = &rest[close + 1..];
            at = at.into_iter().flat_map(|v| subscript(v, inner)).collect();
        } else if let Some(rest) = path.strip_prefix('.') {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let field = &rest[..end];
            path = &rest[end..];
            if field.is_empty() {
                continue;
            }
            at = at
                .into_iter()
                .flat_map(|v| match (field, v) {
                    ("*", Value::Object(map)) => map.values().collect(),
                    ("*", Value::Array(items)) => items.iter().collect(),
                    _ => v.get(field).into_iter().collect::<Vec<_>>(),
                })
                .collect();
        } else {
            return Vec::new();
        }
    }
    at
}

/// Where the `]` closing a subscript is, skipping quoted text.
fn bracket_end(text: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> Option<&str> {
    let text = text.trim();
    text.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

/// What subscript `inner` (between the brackets) selects from `value`.
fn subscript<'a>(value: &'a Value, inner: &str) -> Vec<&'a Value> {
    if inner == "*" {
        return match value {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => Vec::new(),
        };
    }
    if let Some(filter) = inner.strip_prefix('?') {
        let filter = filter.trim();
        let filter = filter
            .strip_prefix('(')
            .and_then(|f| f.strip_suffix(')'))
            .unwrap_or(filter);
        let items: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        return items
            .into_iter()
            .filter(|item| matches(item, filter))
            .collect();
    }
    if let Some(field) = unquote(inner) {
        return value.get(field).into_iter().collect();
    }
    match (inner.parse::<i64>(), value) {
        (Ok(i), Value::Array(items)) => {
            let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
            let i = if i < 0 { len + i } else { i };
            usize::try_from(i)
                .ok()
                .and_then(|i| items.get(i))
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Whether `item` passes filter `@.path`, `@.path == literal` or `@.path != literal`.
fn matches(item: &Value, filter: &str) -> bool {
    let (left, op, right) = match (filter.split_once("=="), filter.split_once("!=")) {
        (Some((l, r)), _) => (l, Some(true), Some(r)),
        (None, Some((l, r))) => (l, Some(false), Some(r)),
        (None, None) => (filter, None, None),
    };
    let Some(path) = left.trim().strip_prefix('@') else {
        return false;
    };
    let found = select(vec![item], path).into_iter().next();
    match (op, right) {
        (Some(equal), Some(right)) => {
            let right = right.trim();
            let literal = match unquote(right) {
                Some(text) => Value::String(text.to_owned()),
                None => serde_json::from_str(right).unwrap_or(Value::Null),
            };
            (found == Some(&literal)) == equal
        }
        _ => found.is_some_and(|v| !v.is_null()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_should_select_as_kubes_do() {
        let object = json!({
            "metadata": {"name": "x", "labels": {"a.b/c": "v"}},
            "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
            "status": {"conditions": [
                {"type": "Degraded", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "Running"},
            ]},
        });
        let cases = [
            (".spec.replicas", Some(json!(3))),
            ("{.spec.replicas}", Some(json!(3))),
            ("$.spec.replicas", Some(json!(3))),
            (".spec.ports[1].port", Some(json!(443))),
            (".spec.ports[-1].port", Some(json!(443))),
            (".spec.ports[*].port", Some(json!(80))),
            (".metadata.labels['a.b/c']", Some(json!("v"))),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                Some(json!("True")),
            ),
            (
                ".status.conditions[?(@.type=='Ready')].reason",
                Some(json!("Running")),
            ),
            (
                ".status.conditions[?(@.type!=\"Ready\")].type",
                Some(json!("Degraded")),
            ),
            (".status.conditions[?(@.reason)].type", Some(json!("Ready"))),
            (".status.conditions[?(@.type==\"Gone\")].status", None),
            (".spec.missing", None),
            (".spec.ports[9]", None),
        ];
        for (path, expected) in cases {
            assert_eq!(json_path(&object, path).cloned(), expected, "{path}");
        }
    }
}
