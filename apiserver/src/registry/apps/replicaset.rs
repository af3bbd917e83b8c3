//! ReplicaSets: one replica by default, a selector matching the template, `printReplicaSet`'s
//! row, selectable by `status.replicas`.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use crate::registry::workload::{
    self, CONTAINERS, IMAGES, SELECTOR, default_template, template_cells,
};
use krec_core::error::Cause;
use krec_core::selector::FieldLabel;

const GROUP: &str = "apps";
const KIND: &str = "ReplicaSet";

/// The ReplicaSet strategy.
pub struct ReplicaSetStrategy;

/// The ReplicaSet strategy.
pub static STRATEGY: ReplicaSetStrategy = ReplicaSetStrategy;

impl Strategy for ReplicaSetStrategy {
    /// One replica by default.
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        set(spec, "replicas", json!(1));
        default_template(spec);
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::int("Desired"),
            Column::int("Current"),
            Column::int("Ready"),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        vec![
            row.name(),
            json!(row.int("/spec/replicas")),
            json!(row.int("/status/replicas")),
            json!(row.int("/status/readyReplicas")),
            row.age(),
        ]
        .into_iter()
        .chain(template_cells(row, true))
        .collect()
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        workload::validate(GROUP, KIND, object, old)
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("status.replicas", "/status/replicas", "0")]
    }
}
