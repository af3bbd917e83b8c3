//! Nodes: `printNode`'s row, selectable by `spec.unschedulable`.

use serde_json::{Value, json};

use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::json::Pointer;
use krec_core::selector::FieldLabel;

/// The Node strategy.
pub struct NodeStrategy;

/// The Node strategy.
pub static STRATEGY: NodeStrategy = NodeStrategy;

impl Strategy for NodeStrategy {
    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Status"),
            Column::text("Roles"),
            AGE,
            Column::text("Version"),
            Column::text("Internal-IP").wide(),
            Column::text("External-IP").wide(),
            Column::text("OS-Image").wide(),
            Column::text("Kernel-Version").wide(),
            Column::text("Container-Runtime").wide(),
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        cells(row)
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("spec.unschedulable", "/spec/unschedulable", "false")]
    }
}

/// A node's row, as `printNode`: `Ready`/`NotReady`/`Unknown` (`,SchedulingDisabled` when
/// cordoned), roles from the `node-role.kubernetes.io/*` labels, the kubelet version, and with
/// `-o wide` its addresses and `nodeInfo`.
fn cells(row: &Row<'_>) -> Vec<Value> {
    let o = row.object;
    let conditions = o.at("/status/conditions").and_then(Value::as_array);
    let mut status = match conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| &c["status"])
    {
        Some(s) if s == "True" => "Ready".to_owned(),
        Some(s) if s == "False" => "NotReady".to_owned(),
        _ => "Unknown".to_owned(),
    };
    if o.at("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = o
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort_unstable();
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    };
    let address = |kind: &str| {
        o.at("/status/addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_owned()
    };
    let info = |field: &str| {
        o.at("/status/nodeInfo")
            .and_then(|i| i.get(field))
            .and_then(Value::as_str)
            .unwrap_or("<unknown>")
            .to_owned()
    };
    vec![
        row.name(),
        json!(status),
        json!(roles),
        row.age(),
        json!(info("kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}
