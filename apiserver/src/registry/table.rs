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
                (_, Some(v)) => v.clone(),
            });
        }
        cells
    };
    (columns, Box::new(cells))
}

/// The value at a simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`).
fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = object;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, index) = match part.split_once('[') {
            Some((field, rest)) => (field, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            at = at.get(field)?;
        }
        if let Some(i) = index {
            at = at.get(i)?;
        }
    }
    Some(at)
}
